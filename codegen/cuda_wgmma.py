"""Hopper (sm_90a) contraction kernels: warpgroup MMA (``wgmma.mma_async``) on operands staged
into 128-byte-swizzled shared memory by ``cp.async`` (issue 17).

``mma.sync`` (:mod:`polyopt.codegen.cuda_contraction`) reaches a quarter of an H100's tensor
throughput; ``wgmma`` is how cuBLAS gets the rest. A ``wgmma`` variant of the ``hmma`` (f16/bf16
operands, f32 accumulation) and ``tf32`` engines (``Variant.wgmma``):

- the block is two *consumer warpgroups* (256 threads); warpgroup ``w`` owns rows
  ``64w .. 64w + 63`` of the ``BM = 128`` x ``BN`` block tile and all its columns, one
  ``wgmma.m64nBNk16`` (``k8`` for TF32) per 32 bytes of K;
- each K tile holds 128 bytes of K per operand row (``BK`` = 64 halves or 32 floats) and lies in
  shared memory in the 128-byte swizzle's layout: rows of 128 bytes, 16-byte chunk ``c`` of row
  ``r`` stored at chunk ``c ^ (r % 8)`` (the XOR of address bits [4:6] with [7:9]), every
  8-row atom (1,024 bytes) 1,024-byte aligned. An operand whose K run is contiguous in memory is
  stored *K-major* (a row per M/N index); one whose M/N run is contiguous *MN-major* for halves:
  blocks of 64 M/N indices, each a row per K value, and ``wgmma`` reads it transposed
  (``imm-trans``). TF32 ``wgmma`` takes K-major tiles only: such a TF32 operand is transposed on
  its way in, one 4-byte ``cp.async`` per element into its K-major tile (a warp's 32 copies: 8
  consecutive M/N indices by 4 K values, 32-byte pieces of global rows, 32 distinct banks);
- ``cp.async`` copies 16-byte chunks into a ring of ``stages`` K tiles as the other
  asynchronous kernels do (a chunk past the array's run is zero-filled), then each thread
  fences the generic-proxy writes for the async proxy (``fence.proxy.async``) before the
  barrier after which the warpgroups read the tile;
- the accumulators are registers in ``wgmma``'s D fragment: register ``4j + r`` of lane
  ``4g + t`` in warp ``q`` of the warpgroup holds row ``16q + g + 8(r / 2)``, column
  ``8j + 2t + r % 2``; they start as the existing kernels' do (the init statement applied to the
  output, or zero) and are stored through the same epilogue code (:func:`element_store`); a
  warp-specialized kernel of a half output stages each warp's rows in shared memory beside the
  ring and writes them back in 16-byte vectors (:func:`staging_bytes`).

Warp-specialized variants (``Variant.specialized``, 384 threads, :func:`_specialized`): a
producer warpgroup issues the copies, two consumer warpgroups only the ``wgmma`` and the epilogue;
full/empty mbarriers per ring slot replace the block barriers, so the producer fills slots
while the consumers compute and store. Their TMA form (``Variant.tma``): one producer thread
issues a 3-D tensor copy per operand and K tile (``cp.async.bulk.tensor`` into the same
128-byte-swizzled layout, the hardware zero-filling what lies outside the operand), and
``setmaxnreg`` gives the consumers the producer warpgroup's registers; a TF32 operand with
contiguous M/N is read from a K-major copy the launch makes (TMA does not transpose 4-byte
elements: :mod:`polyopt.targets.tensor_maps`).

The kernels are compiled only where ``__CUDA_ARCH_FEAT_SM90_ALL`` is defined (``-arch=sm_90a``);
built for any other target their body is empty, and the launch selection takes them only from a
module built for sm_90a (:func:`polyopt.targets.contraction.choose_kernel`).
"""
from __future__ import annotations

from polyopt.analysis import expr as E
from polyopt.analysis.contraction import ELEMENT, Contraction, Operand
from polyopt.analysis.scop import Scop
from polyopt.codegen.contraction_text import (STAGED_PAD, Slots, StagedType, StagingScope, UnitStrides, element_test,
                                              fragment_stores, grid_loops, half_store, init_text, outer_k_offsets,
                                              pair_k_loops, scalar_text, staged_stores)

#: Bytes of one row of a swizzled tile (the 128-byte swizzle's width) and of one 8-row atom.
ROW_BYTES = 128
ATOM_BYTES = 1024
#: Alignment the swizzled tiles need (bytes); the dynamic shared memory is rounded up to it.
TILE_ALIGN = 1024
#: Per engine: the K of one ``wgmma`` and the PTX operand type.
WGMMA_K = {"hmma": 16, "tf32": 8}
#: Rows of the output tile one warpgroup computes (``wgmma``'s M).
WARPGROUP_ROWS = 64
WARPGROUP_THREADS = 128
#: The kernel telling whether a build of the source has the ``wgmma`` kernels (one thread
#: writes 1 or 0): the launch checks a build before taking them.
PROBE = "polyopt_sm90a_probe"


def operand_plain(value: E.Expr) -> bool:
    """Whether an operand is read as the array element itself (or widened to f32): ``wgmma``
    reads shared memory directly, so there is no place to compute on an operand."""
    if isinstance(value, E.Cast) and value.dtype.name == "f32":
        value = value.operand
    return isinstance(value, E.Var) and value.name == ELEMENT


def _factor(value: E.Expr) -> E.Expr | None:
    """The factor of an operand read as ``factor * element`` or ``element * factor`` (the
    element plain, :func:`operand_plain`; the factor an expression of scalars and parameters),
    else None."""
    if not (isinstance(value, E.Binary) and value.op == "*"):
        return None
    def varies(x: E.Expr) -> bool:  # an array element, an iterator or the operand's element
        return isinstance(x, E.Access) or (isinstance(x, E.Var) and (x.kind == "iter" or x.name == ELEMENT))

    for element, factor in ((value.rhs, value.lhs), (value.lhs, value.rhs)):
        if operand_plain(element) and not any(map(varies, E.walk(factor))):
            return factor
    return None


def sum_scale(c: Contraction) -> E.Expr | None | bool:
    """The factor a ``wgmma`` kernel applies to the finished sum: where each operand pair reads
    one operand as ``factor * element`` (gemm's ``alpha * A[i][k]``) and every pair the same
    factor, that factor (``wgmma`` reads the elements from shared memory, with no place to compute
    on them; the kernel sums the plain products from zero and stores ``init + factor * sum``, as
    cuBLAS applies alpha: the products' rounding moves, as the tensor cores' order of the sum
    already moves it). None where every operand is plain; False where no factor serves."""
    scales = []
    for pair in c.pairs:
        computed = [o.value for o in pair if not operand_plain(o.value)]
        if len(computed) > 1 or (computed and _factor(computed[0]) is None):
            return False
        scales.append(_factor(computed[0]) if computed else None)
    if all(f is None for f in scales):
        return None
    return scales[0] if all(f == scales[0] for f in scales) else False


def wgmma_layouts(c: Contraction, v) -> tuple[bool, bool] | None:
    """Per operand (left, right), whether its tile is K-major in shared memory; None where the
    ``wgmma`` variant ``v`` cannot compute ``c`` (an operand with neither run contiguous, a
    TF32 operand whose K run is not contiguous, an operand computed on other than by a factor
    :func:`sum_scale` takes out of the sum; with several operand pairs, the runs contiguous in
    every pair, :class:`UnitStrides`)."""
    unit = UnitStrides.of(c)
    if sum_scale(c) is False:
        return None
    layouts = []
    for k_unit, run_unit in ((unit.lk, unit.lm), (unit.rk, unit.rn)):
        if k_unit:
            layouts.append(True)
        elif run_unit:  # halves: MN-major tile read transposed; TF32: K-major tile, transposed on the copy
            layouts.append(v.engine != "hmma")
        else:
            return None
    return layouts[0], layouts[1]


def transposed_copies(c: Contraction, v) -> tuple[bool, bool]:
    """Per operand (left, right), whether its K-major tile is copied from an operand whose M/N
    run (not its K run) is contiguous: 4-byte ``cp.async`` per element (TF32 only; module
    docstring)."""
    unit = UnitStrides.of(c)
    layouts = wgmma_layouts(c, v)
    return tuple(bool(layouts and layouts[i] and not k_unit) for i, k_unit in enumerate((unit.lk, unit.rk)))


def tma_layouts(c: Contraction, v) -> bool:
    """Whether the TMA kernel ``v`` can compute ``c``: one operand pair, each operand a tile
    the ``wgmma`` reads (a TF32 operand whose M/N run is contiguous is read K-major from a
    transposed copy the launch makes first: TMA moves boxes, it does not transpose 4-byte
    elements, :class:`polyopt.targets.tensor_maps.MapSpec`)."""
    return len(c.pairs) == 1 and wgmma_layouts(c, v) is not None


def tile_bytes(v, rows: int) -> int:
    """Bytes of one operand's K tile (``rows`` M or N indices by 128 bytes of K)."""
    return rows * ROW_BYTES


#: The dynamic shared memory a block may opt in to on sm_90 (bytes).
SHARED_OPT_IN_LIMIT = 227 * 1024


def _ring_bytes(v) -> int:
    """The ring, the alignment slack and (warp-specialized) the full and empty mbarrier of each
    stage."""
    barriers = 16 * v.stages if v.specialized else 0
    return v.stages * (tile_bytes(v, v.bm) + tile_bytes(v, v.bn)) + TILE_ALIGN + barriers


#: Columns a warp-specialized kernel stages at a time where its whole tile does not fit beside
#: the ring (:func:`staging_columns`).
STAGING_CHUNK = 64


def staging_columns(v) -> int:
    """The columns of its half output tile a warp-specialized kernel of half operands stages at a
    time (:func:`wgmma_body`), beside the ring (whose slots the producer fills with the next
    tiles while the consumers store): all ``BN`` where they fit in the SM's shared memory, else
    :data:`STAGING_CHUNK` on the TMA kernels (the 128 x 256 tiles: their consumers have the
    registers ``setmaxnreg`` gives them; the ``cp.async`` 128 x 256 kernel spilled 152 bytes
    with the rounds); 0 for the others, whose fragments go straight to memory: the kernels that
    are not warp-specialized (not measured with it) and the ``cp.async`` ones with no room."""
    if not v.specialized or v.engine != "hmma":
        return 0
    fitting = [cols for cols in (v.bn, STAGING_CHUNK) if (cols == v.bn or v.tma)
               and _ring_bytes(v) + v.bm * (cols + STAGED_PAD) * 2 <= SHARED_OPT_IN_LIMIT]
    return fitting[0] if fitting else 0


def staging_bytes(v) -> int:
    """The shared memory after the mbarriers where a kernel stages its half output
    (:func:`staging_columns`: ``BM`` rows of that many halves and the pad), 0 where it does not."""
    cols = staging_columns(v)
    return v.bm * (cols + STAGED_PAD) * 2 if cols else 0


def wgmma_shared_bytes(v) -> int:
    """Dynamic shared memory of ``wgmma`` variant ``v``: the ring (:func:`_ring_bytes`) and the
    staged output tile (:func:`staging_bytes`)."""
    return _ring_bytes(v) + staging_bytes(v)


def copy_threads(v) -> int:
    """The threads that copy the tiles: all, or warp-specialized the producer warpgroup."""
    return WARPGROUP_THREADS if v.specialized else v.threads



def check_variant(v, operand_bytes: int) -> None:
    """Refuse a ``wgmma`` tile this emitter does not make (ValueError)."""
    per_row = ROW_BYTES // operand_bytes
    threads = (3 if v.specialized else 2) * WARPGROUP_THREADS
    if (v.bm != 2 * WARPGROUP_ROWS or v.threads != threads or v.bk != per_row
            or v.bn % 64 or not 64 <= v.bn <= 256 or v.stages < 2 + v.inflight or v.inflight not in (0, 1)
            or (v.specialized and v.inflight != 1) or (v.tma and not v.specialized)
            or any(rows * ROW_BYTES % (16 * copy_threads(v)) for rows in (v.bm, v.bn))):
        raise ValueError(f"wgmma contraction tile {v}: needs BM = 128, 256 threads (384 warp-specialized, "
                         "one wgmma group in flight), BK = 128 bytes, BN a multiple of 64 up to 256")


def wgmma_helpers(engines: set[str], half: str | None, shapes: set[tuple[str, int, int, int]]) -> str:
    """Device helpers: the descriptor, fences, and one ``wgmma`` wrapper per (engine, N,
    transpose A, transpose B) in ``shapes``; all inside the sm_90a guard."""
    out = ["#if defined(__CUDA_ARCH_FEAT_SM90_ALL)",
           "/* wgmma shared-memory matrix descriptor: start address, leading and stride byte offsets",
           "   (all >> 4), 128-byte swizzle (mode 1 in bits 62-63); base offset 0: tiles 1024-aligned */",
           "__device__ inline uint64_t pl_wg_desc(const void *p, unsigned lbo, unsigned sbo) {",
           "  const unsigned a = (unsigned)__cvta_generic_to_shared(p);",
           "  return (uint64_t)((a & 0x3FFFFu) >> 4) | ((uint64_t)((lbo & 0x3FFFFu) >> 4) << 16)",
           "         | ((uint64_t)((sbo & 0x3FFFFu) >> 4) << 32) | (1ull << 62);",
           "}",
           '__device__ inline void pl_wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }',
           '__device__ inline void pl_wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }',
           "template <int N> __device__ inline void pl_wg_wait() "
           '{ asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory"); }',
           "/* the accumulators as operands of an empty asm: no access to them moves across a wgmma wait */",
           '__device__ inline void pl_wg_keep(float &x) { asm volatile("" : "+f"(x) :: "memory"); }',
           '__device__ inline void pl_proxy_fence() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }',
           "/* one 4-byte element by cp.async (a TF32 operand transposed into its K-major tile); 0 bytes: zero-filled */",
           "__device__ inline void pl_cp4(void *dst, const void *src, int bytes) {",
           "  const unsigned s = (unsigned)__cvta_generic_to_shared(dst);",
           '  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" :: "r"(s), "l"(src), "r"(bytes) : "memory");',
           "}",
           "/* mbarriers (warp-specialized kernels): init, arrive, wait for the phase of a parity */",
           "__device__ inline void pl_mb_init(uint64_t *b, unsigned count) {",
           '  asm volatile("mbarrier.init.shared.b64 [%0], %1;" :: "r"((unsigned)__cvta_generic_to_shared(b)), "r"(count) : "memory");',
           "}",
           "__device__ inline void pl_mb_arrive(uint64_t *b) {",
           '  asm volatile("{\\n.reg .b64 st;\\nmbarrier.arrive.shared.b64 st, [%0];\\n}\\n" :: "r"((unsigned)__cvta_generic_to_shared(b)) : "memory");',
           "}",
           "__device__ inline void pl_mb_wait(uint64_t *b, unsigned parity) {",
           "  const unsigned a = (unsigned)__cvta_generic_to_shared(b);",
           "  unsigned ok = 0;",
           "  while (!ok)",
           '    asm volatile("{\\n.reg .pred p;\\nmbarrier.try_wait.parity.shared.b64 p, [%1], %2;\\nselp.u32 %0, 1, 0, p;\\n}\\n"',
           '                 : "=r"(ok) : "r"(a), "r"(parity) : "memory");',
           "}",
           "/* TMA (warp-specialized TMA kernels): the producer's arrival announcing a slot's bytes, a",
           "   3-D tensor copy completing on that mbarrier (a tensor map in global memory, coordinates",
           "   inner first: the contiguous run, the rows, the batch), and the map's prefetch */",
           "__device__ inline void pl_mb_expect(uint64_t *b, unsigned bytes) {",
           '  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" '
           ':: "r"((unsigned)__cvta_generic_to_shared(b)), "r"(bytes) : "memory");',
           "}",
           "__device__ inline void pl_tma3(void *dst, const void *map, int c0, int c1, int c2, uint64_t *b) {",
           '  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"',
           '               :: "r"((unsigned)__cvta_generic_to_shared(dst)), "l"(map), "r"(c0), "r"(c1), "r"(c2),',
           '                  "r"((unsigned)__cvta_generic_to_shared(b)) : "memory");',
           "}",
           '__device__ inline void pl_tma_prefetch(const void *map) { asm volatile("prefetch.tensormap [%0];" :: "l"(map) : "memory"); }',
           ]
    for engine, n, ta, tb in sorted(shapes):
        regs = n // 2
        d = ",".join(f"%{i}" for i in range(regs))
        if engine == "hmma":
            ptx_t, k = half, 16
            tail = f", p, 1, 1, {ta}, {tb};"
        else:
            ptx_t, k = "tf32", 8
            tail = ", p, 1, 1;"
        constraints = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
        out += [f"__device__ __forceinline__ void pl_wgmma_{engine}_n{n}_{ta}{tb}(float *d, uint64_t a, uint64_t b) {{",
                '  asm volatile("{\\n.reg .pred p;\\nsetp.ne.b32 p, %' + str(regs + 2) + ', 0;\\n"',
                f'               "wgmma.mma_async.sync.aligned.m64n{n}k{k}.f32.{ptx_t}.{ptx_t} "',
                f'               "{{{d}}}, %{regs}, %{regs + 1}{tail}\\n}}\\n"',
                f"               : {constraints}",
                '               : "l"(a), "l"(b), "r"(1));',
                "}"]
    out += ["#endif",
            "/* 1 where this build has the wgmma kernels (-arch=sm_90a), 0 where their bodies are empty */",
            f'extern "C" __global__ void {PROBE}(int *out)',
            "{",
            "#if defined(__CUDA_ARCH_FEAT_SM90_ALL)",
            "  *out = 1;",
            "#else",
            "  *out = 0;",
            "#endif",
            "}"]
    return "\n".join(out) + "\n"


def wgmma_shape(c: Contraction, v) -> tuple[str, int, int, int]:
    """(engine, N, transpose A, transpose B) of the ``wgmma`` variant ``v`` on ``c``."""
    a_k, b_k = wgmma_layouts(c, v)
    return v.engine, v.bn, int(not a_k), int(not b_k)


def _copies(c: Contraction, pair: tuple[Operand, Operand], v, operand_bytes: int,
            layouts: tuple[bool, bool]) -> list[str]:
    """``cp.async`` of operand pair ``pair``'s K tile at ``_nk0`` into ring slot ``_ls`` by the copying threads
    (``_ct`` of :func:`copy_threads`), 16-byte chunks written at their swizzled place (module
    docstring); a chunk past the array's run is zero-filled. A TF32 operand whose M/N run is
    contiguous goes into its K-major tile one 4-byte element per ``cp.async``: a warp's 32
    copies are 8 consecutive M/N indices (32 bytes of a row in memory) by 4 consecutive K
    values, which land in 8 different 16-byte chunks of the swizzle (all 32 banks)."""
    per_vector = 16 // operand_bytes
    threads = copy_threads(v)
    transposed = transposed_copies(c, v)
    out = []
    for rows, operand, s_row, s_k, off, koff, total, buf, k_major, row0, by_element in (
            (v.bm, pair[0], "sLm", "sLk", "_offL", "_nkL", "_M", "_As", layouts[0], "_m0", transposed[0]),
            (v.bn, pair[1], "sRn", "sRk", "_offR", "_nkR", "_N", "_Bs", layouts[1], "_n0", transposed[1])):
        if by_element:  # warp w, lane l: K chunk (w % 8) * 4 + l / 8 of M/N rows (w / 8) * 8 + l % 8
            warps, chunks = threads // 32, v.bk // 4
            per = chunks // warps  # element copies of a thread in one K chunk column
            out += ["        { const int _l = _ct % 32, _r0 = _l % 8, _kh0 = _ct / 32, _k0 = _kh0 * 4 + _l / 8;",
                    f"          const long _gr0 = {row0} + _r0, _gk0 = _nk0 + _k0;",
                    f"          unsigned char *const _d0 = {buf} + _ls * {tile_bytes(v, rows)} + _r0 * {ROW_BYTES} + (_l / 8) * 4;",
                    f"          const auto *const _s0 = {operand.array} + {off} + {koff} + _gr0 + _gk0 * {s_k};"]
            # a rolled loop (4 at a time): unrolled, the compiler keeps every copy's bound and
            # address across the K loop, past a warp-specialized kernel's 168 registers
            out += ["          #pragma unroll 4",
                    f"          for (int _q = 0; _q < {rows * v.bk // threads}; _q++) {{",
                    f"            const int _r = (_q / {per}) * 8, _kh = {warps} * (_q % {per});  /* to _r0, _kh0 */",
                    f"            const int _nb = (_gr0 + _r < {total} && _gk0 + 4 * _kh < _K) ? 4 : 0;",
                    f"            pl_cp4(_d0 + _r * {ROW_BYTES} + (((_kh0 + _kh) ^ _r0) << 4), "
                    f"_nb ? _s0 + _r + 4 * _kh * {s_k} : {operand.array}, _nb);",
                    "          }"]
            out.append("        }")
            continue
        count = rows * ROW_BYTES // 16 // threads
        # register-limited kernels (384 threads, or two blocks per SM): a rolled loop, 4 at a time
        unroll = " 4" if v.specialized or v.blocks_per_sm > 1 else ""
        out.append(f"        #pragma unroll{unroll}\n        for (int _q = 0; _q < {count}; _q++) {{")
        out.append(f"          const int _c = _ct + _q * {threads};")
        if k_major:  # row _r (M/N index), chunk _h of its 128 bytes of K
            out += ["          const int _r = _c / 8, _h = _c % 8, _k = _h * " + str(per_vector) + ";",
                    f"          const int _at = _r * {ROW_BYTES} + ((_h ^ (_r % 8)) * 16);"]
            inside = f"_K - _gk < {per_vector} ? _K - _gk : {per_vector}"
            address = f"_gr * {s_row} + _gk"
        else:  # K row _k, chunk _h across the M/N indices: blocks of 64 indices
            chunks = rows // per_vector
            out += [f"          const int _k = _c / {chunks}, _h = _c % {chunks}, _r = _h * {per_vector};",
                    f"          const int _at = (_h / 8) * {v.bk * ROW_BYTES} + _k * {ROW_BYTES} + (((_h % 8) ^ (_k % 8)) * 16);"]
            inside = f"{total} - _gr < {per_vector} ? {total} - _gr : {per_vector}"
            address = f"_gr + _gk * {s_k}"
        out += [f"          const long _gr = {row0} + _r, _gk = _nk0 + _k;",
                f"          const int _nb = (_gr < {total} && _gk < _K) ? (int)({inside}) * {operand_bytes} : 0;",
                f"          pl_cp16({buf} + _ls * {tile_bytes(v, rows)} + _at, "
                f"{operand.array} + {off} + {koff} + (_nb ? {address} : 0), _nb);",
                "        }"]
    return out


def _mma_steps(c: Contraction, v, layouts: tuple[bool, bool]) -> list[str]:
    """The ``wgmma`` of one K tile (slot ``_cs``): per K step, the descriptors of the
    warpgroup's 64 rows of A and of all of B. K-major: the step starts 32 bytes further in the
    swizzled rows, the 8-row atoms are 1,024 bytes apart (stride offset). MN-major: the step
    starts 16 K rows (2,048 bytes) further; the 8-K-row atoms are 1,024 bytes apart (stride
    offset) and the blocks of 64 M/N indices ``BK`` rows apart (leading offset)."""
    k_bytes = WGMMA_K[v.engine] * (ROW_BYTES // v.bk)  # bytes of K per wgmma
    engine, n, ta, tb = wgmma_shape(c, v)
    block = v.bk * ROW_BYTES  # an MN-major block of 64 indices

    def desc(base: str, k_major: bool, step: int) -> str:
        if k_major:
            return f"pl_wg_desc({base} + {step * k_bytes}, 16, {ATOM_BYTES})"
        return f"pl_wg_desc({base} + {step * WGMMA_K[v.engine] * ROW_BYTES}, {block}, {ATOM_BYTES})"
    a_rows = f"_wg * {WARPGROUP_ROWS * ROW_BYTES}" if layouts[0] else f"_wg * {block}"
    out = [f"        {{ const unsigned char *const _sa = _As + _cs * {tile_bytes(v, v.bm)} + {a_rows};",
           f"          const unsigned char *const _sb = _Bs + _cs * {tile_bytes(v, v.bn)};"]
    for step in range(v.bk // WGMMA_K[v.engine]):
        out.append(f"          pl_wgmma_{engine}_n{n}_{ta}{tb}(_acc, {desc('_sa', layouts[0], step)}, "
                   f"{desc('_sb', layouts[1], step)});")
    return out + ["        }"]


def wgmma_body(scop: Scop, c: Contraction, v, t: str, operand_bytes: int) -> list[str]:
    """The kernel body of ``wgmma`` variant ``v`` (module docstring), inside the sm_90a guard."""
    check_variant(v, operand_bytes)
    layouts = wgmma_layouts(c, v)
    if layouts is None:
        raise ValueError(f"wgmma contraction tile {v}: the operands' layout does not allow it")
    slots = Slots.of(c)
    regs = v.bn // 2
    row = f"_wg * {WARPGROUP_ROWS} + _wq * 16 + _g + (_r / 2) * 8"
    col = "_j * 8 + _tg * 2 + (_r % 2)"
    out = ["#if defined(__CUDA_ARCH_FEAT_SM90_ALL)",
           f"  enum {{ BM = {v.bm}, BN = {v.bn}, BK = {v.bk} }};",
           "  extern __shared__ __align__(1024) unsigned char _wsmem[];",
           "  const unsigned _pad = (1024u - ((unsigned)__cvta_generic_to_shared(_wsmem) % 1024u)) % 1024u;",
           f"  unsigned char *const _As = _wsmem + _pad, *const _Bs = _As + {v.stages * tile_bytes(v, v.bm)};"]
    start = init_text(scop, c, f"{c.output}[_offC + _m * sCm + _n * sCn]")
    scale, finished = sum_scale(c), "_acc[_j * 4 + _r]"
    if scale is None:
        init = [f"      float _acc[{regs}];",
                f"      #pragma unroll\n      for (int _j = 0; _j < {v.bn // 8}; _j++)",
                "        #pragma unroll\n        for (int _r = 0; _r < 4; _r++) {",
                f"          const long _m = _m0 + {row}, _n = _n0 + {col};",
                f"          _acc[_j * 4 + _r] = (_m < _M && _n < _N{element_test(c)}) ? {start} : 0.0f;",
                "        }"]
    else:  # the plain products summed from zero, the factor applied to the sum (sum_scale)
        init = [f"      float _acc[{regs}];",
                f"      #pragma unroll\n      for (int _j = 0; _j < {regs}; _j++) _acc[_j] = 0.0f;"]
        finished = f"(({start}) + ({scalar_text(scop, scale, '0')}) * {finished})"
    store = [f"      #pragma unroll\n      for (int _j = 0; _j < {v.bn // 8}; _j++)",
             *fragment_stores(scop, c, row, col, finished, t)]
    half = half_store(scop, c)
    cols = staging_columns(v)
    if cols and half is not None and not c.domain:  # (a cut box: the rows would overwrite)
        first_j = f"_h * {cols // 8}" if cols < v.bn else "0"  # (in rounds of cols columns)
        fragments = [f"        #pragma unroll\n        for (int _j = {first_j}; _j < {first_j} + {cols // 8}; _j++)",
                     "          #pragma unroll\n          for (int _r0 = 0; _r0 < 4; _r0 += 2) {"]
        buffer = f"_Bs + {v.stages * tile_bytes(v, v.bn) + 16 * v.stages}"  # after the mbarriers
        store = staged_stores(scop, c, fragments, row, col, finished, t, buffer, v.bn,
                              StagingScope.warp(f"_wg * {WARPGROUP_ROWS} + _wq * 16"),
                              StagedType.half(half), alternative=False,
                              whole=scale is None and not c.epilogue, chunk=cols
                              ) + ["      } else {"] + store + ["      }"]
    advance = ["        _nk0 += BK;", "        if (_nk0 >= _K) {", "          _nk0 = 0; _nko += 1;"] + \
              (outer_k_offsets(slots) if slots.outer_k else []) + ["        }"]
    def copies(pair: tuple[Operand, Operand]) -> list[str]:
        return ["        {"] + _copies(c, pair, v, operand_bytes, layouts) + ["        }"]
    k_state = [_tile_count(1),
               "      long _nk0 = 0, _nko = 0;",
               "      long _nkL = 0, _nkR = 0;" if slots.outer_k else "      const long _nkL = 0, _nkR = 0;"]
    keep = [f"        #pragma unroll\n        for (int _i = 0; _i < {regs}; _i++) pl_wg_keep(_acc[_i]);"]
    if v.specialized:
        return out + _specialized(c, v, layouts, init, store, advance, copies, k_state, keep, t)
    out += [f"  const int _wg = threadIdx.x / {WARPGROUP_THREADS}, _wq = (threadIdx.x % {WARPGROUP_THREADS}) / 32;",
            "  const int _lane = threadIdx.x % 32, _g = _lane / 4, _tg = _lane % 4, _ct = threadIdx.x;"]
    out += grid_loops(c, slots, t)
    out += init
    out += pair_k_loops(c, lambda pair: _k_loop(c, v, layouts, copies(pair) + advance, k_state, keep))
    out += store + ["    }", "    }", "  }", "#endif"]
    return out


def _tile_count(pairs: int) -> str:
    """The declaration of ``_NT``: the K tiles of one operand pair, or of ``pairs`` of them one
    after the other (the consumers of a warp-specialized kernel, which walk every pair's tiles
    in one loop: they read the ring, not the operands)."""
    return f"      const long _NT = (_K + BK - 1) / BK * _KO{f' * {pairs}' if pairs > 1 else ''};"


def _k_loop(c: Contraction, v, layouts: tuple[bool, bool], copy: list[str], k_state: list[str],
            keep: list[str]) -> list[str]:
    """The K loop of the (not warp-specialized) ``wgmma`` kernel ``v`` over one operand pair's
    tiles (``copy``: the copies of the tile at ``_nk0`` and the step to the next one): the
    ring filled ahead, then per tile its ``wgmma`` and the next request; it ends with every
    group and copy complete (the next pair or block tile reuses the ring)."""
    request = copy + [f"        _ls = _ls + 1 == {v.stages} ? 0 : _ls + 1;"]
    ahead = v.stages - 1 - v.inflight  # tiles requested ahead of the one computed
    out = k_state + ["      int _ls = 0, _cs = 0;",
                     f"      for (int _s = 0; _s < {ahead}; _s++) {{",
                     "        if (_s < _NT) {"] + request + ["        }", "        pl_cp_commit();", "      }"]
    out += keep
    # per tile: wait for it, make it visible to the async proxy, barrier; wgmma on it; request
    # the tile `ahead` tiles on into the slot of tile - 1 - inflight (every warpgroup finished
    # reading it: each waited for those products before this tile's barrier); wait until
    # `inflight` wgmma groups are left. With inflight 1 the accumulators are not touched
    # between the wgmma (no register access while one is in flight).
    out += ["      for (long _tile = 0; _tile < _NT; _tile++) {",
            f"        pl_cp_wait<{ahead - 1}>();",
            "        pl_proxy_fence();",
            "        __syncthreads();"] + (keep if not v.inflight else []) + ["        pl_wg_fence();"]
    out += _mma_steps(c, v, layouts)
    out += ["        pl_wg_commit();",
            f"        if (_tile + {ahead} < _NT) {{"] + request + ["        }", "        pl_cp_commit();",
                                                                  f"        pl_wg_wait<{v.inflight}>();"]
    out += (keep if not v.inflight else [])
    out += [f"        _cs = _cs + 1 == {v.stages} ? 0 : _cs + 1;", "      }", "      pl_wg_wait<0>();"] + keep
    return out + ["      pl_cp_wait<0>();", "      __syncthreads();  /* the next tile of the grid loop reuses the ring */"]


def _specialized(c: Contraction, v, layouts, init, store, advance, copies, k_state, keep, t: str) -> list[str]:
    """The warp-specialized body: warpgroup 0 the producer (``cp.async`` only), warpgroups 1 and 2
    the consumers (``wgmma`` on rows ``64(w - 1)``.., then the epilogue). Each ring slot has a
    *full* mbarrier (128 producer arrivals: the slot's copies are complete and fenced for the
    async proxy) and an *empty* one (256 consumer arrivals: both warpgroups' ``wgmma`` on it are
    complete). Both roles walk the same sequence of tiles (grid loop by K tiles) counting them
    in ``_it``: tile ``_it`` lies in slot ``_it % stages``, and its wait is for the phase of
    parity ``(_it / stages) & 1`` (the producer's empty wait the parity before: its first round
    passes at once). The producer marks a slot full one tile late, after ``cp.async.wait_group
    1`` (its own copies of that slot done) and a proxy fence; at the end of a block tile (of
    each operand pair's tiles: it copies the pairs one after the other, ``copies(pair)``) it
    waits for all. The consumers walk every pair's tiles in one loop. A consumer keeps one
    ``wgmma`` group in flight and frees the slot of the tile before once that group is done; the
    producer goes on to the next block tile's copies while the consumers store theirs. No
    ``setmaxnreg`` with ``cp.async`` copies: the consumers fit the 168 registers of 384 threads
    (128 accumulators at BN = 256), and with it ptxas must fit the producer's copies into what
    the producer keeps (40 to 88 registers: it spilled). A TMA kernel (``Variant.tma``) has one
    producer thread issuing tensor copies (:func:`_tma_producer`): the full mbarriers then count
    its one arrival and the copies' bytes, and the roles trade registers (``setmaxnreg``)."""
    slots = Slots.of(c)
    s = v.stages
    out = [f"  uint64_t *const _full = (uint64_t *)(_Bs + {s * tile_bytes(v, v.bn)}), *const _empty = _full + {s};",
           "  if (threadIdx.x == 0) {",
           f"    for (int _s = 0; _s < {s}; _s++) {{ pl_mb_init(&_full[_s], {1 if v.tma else WARPGROUP_THREADS}); "
           f"pl_mb_init(&_empty[_s], {2 * WARPGROUP_THREADS}); }}",
           '    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");',
           "  }",
           "  __syncthreads();",
           "  unsigned _it = 0;  /* tiles through the ring so far */",
           f"  if (threadIdx.x < {WARPGROUP_THREADS}) {{  /* producer */"]
    if v.tma:
        out += _tma_producer(c, v, layouts, advance, k_state, t)
    else:
        out += ["  const int _ct = threadIdx.x;"] + _copying_producer(c, v, advance, copies, k_state, t)
    out += ["  } else {  /* consumers */"]
    if v.tma:
        out.append(f'  asm volatile("setmaxnreg.inc.sync.aligned.u32 {TMA_CONSUMER_REGISTERS};");')
    out += [f"  const int _wg = threadIdx.x / {WARPGROUP_THREADS} - 1, _wq = (threadIdx.x % {WARPGROUP_THREADS}) / 32;",
            "  const int _lane = threadIdx.x % 32, _g = _lane / 4, _tg = _lane % 4;"]
    out += grid_loops(c, slots, t)
    out += init + [_tile_count(slots.pairs)] + keep
    out += ["      for (long _tile = 0; _tile < _NT; _tile++, _it++) {",
            f"        const int _cs = _it % {s};",
            f"        pl_mb_wait(&_full[_cs], (_it / {s}) & 1);"]
    if not v.tma:  # (tensor copies write through the async proxy that wgmma reads)
        out.append("        pl_proxy_fence();")
    out += ["        pl_wg_fence();"]
    out += _mma_steps(c, v, layouts)
    out += ["        pl_wg_commit();",
            "        pl_wg_wait<1>();",
            f"        if (_tile > 0) pl_mb_arrive(&_empty[(_it - 1) % {s}]);",
            "      }",
            "      pl_wg_wait<0>();"] + keep + [
            f"      if (_NT > 0) pl_mb_arrive(&_empty[(_it - 1) % {s}]);"]
    out += store + ["    }", "    }", "  }", "  }", "#endif"]
    return out


#: Registers per thread of a TMA kernel's roles after ``setmaxnreg``: the producer warpgroup
#: (one thread issues every copy) gives registers up to the two consumer warpgroups
#: (128 x 40 + 256 x 232 = 64,512 of the SM's 65,536).
TMA_PRODUCER_REGISTERS = 40
TMA_CONSUMER_REGISTERS = 232


def _tma_producer(c: Contraction, v, layouts: tuple[bool, bool], advance: list[str], k_state: list[str],
                  t: str) -> list[str]:
    """The producer of a TMA kernel: its warpgroup lowers its registers, and thread 0 walks the
    block's tiles as the consumers do; per K tile it waits for the ring slot to be empty,
    announces the slot's bytes on its full mbarrier and issues one 3-D tensor copy per operand
    (K-major: the box of ``BK`` K values by the tile's rows; MN-major, halves: one box of 64
    M/N indices by ``BK`` K rows per block of 64), which complete on that mbarrier. The tensor
    maps (``_tmL``, ``_tmR``: the operands as 3-D arrays, inner dimension first, the batch
    ``_z`` last, 128-byte swizzle) zero-fill what lies outside the operand, so edge tiles need
    no checks; the launch takes these kernels only where the batch slots in use are one
    dimension of both operands, without outer-K slots, with one operand pair
    (:func:`polyopt.targets.contraction.tma_specs`)."""
    s = v.stages
    copies = []
    for buf, rows, k_major, tensor_map, row0 in (("_As", v.bm, layouts[0], "_tmL", "_m0"),
                                                 ("_Bs", v.bn, layouts[1], "_tmR", "_n0")):
        slot = f"{buf} + _ls * {tile_bytes(v, rows)}"
        if k_major:
            copies.append(f"        pl_tma3({slot}, {tensor_map}, (int)_nk0, (int){row0}, (int)_z, &_full[_ls]);")
        else:
            copies += [f"        pl_tma3({slot} + {j * v.bk * ROW_BYTES}, {tensor_map}, (int)({row0} + {64 * j}), "
                       f"(int)_nk0, (int)_z, &_full[_ls]);" for j in range(rows // 64)]
    out = [f'  asm volatile("setmaxnreg.dec.sync.aligned.u32 {TMA_PRODUCER_REGISTERS};");',
           "  if (threadIdx.x == 0) {",
           "  pl_tma_prefetch(_tmL); pl_tma_prefetch(_tmR);"]
    out += grid_loops(c, Slots.of(c), t)
    out += k_state + [
        "      for (long _tile = 0; _tile < _NT; _tile++, _it++) {",
        f"        const int _ls = _it % {s};",
        f"        pl_mb_wait(&_empty[_ls], ((_it / {s}) & 1) ^ 1);",
        f"        pl_mb_expect(&_full[_ls], {tile_bytes(v, v.bm) + tile_bytes(v, v.bn)});"] + copies + advance + [
        "      }"]
    return out + ["    }", "    }", "  }", "  }"]


def _copying_producer(c: Contraction, v, advance: list[str], copies, k_state: list[str], t: str) -> list[str]:
    """The producer of a warp-specialized ``cp.async`` kernel (:func:`_specialized`): all 128
    threads copy, and mark a slot full one tile late."""
    s = v.stages
    out = grid_loops(c, Slots.of(c), t)

    def produce(pair: tuple[Operand, Operand]) -> list[str]:
        return k_state + [
            "      for (long _tile = 0; _tile < _NT; _tile++, _it++) {",
            f"        const int _ls = _it % {s};",
            f"        pl_mb_wait(&_empty[_ls], ((_it / {s}) & 1) ^ 1);"] + copies(pair) + advance + [
            "        pl_cp_commit();",
            "        if (_tile > 0) {",
            "          pl_cp_wait<1>();",
            "          pl_proxy_fence();",
            f"          pl_mb_arrive(&_full[(_it - 1) % {s}]);",
            "        }",
            "      }",
            "      pl_cp_wait<0>();",
            "      pl_proxy_fence();",
            f"      if (_NT > 0) pl_mb_arrive(&_full[(_it - 1) % {s}]);"]
    return out + pair_k_loops(c, produce) + ["    }", "    }", "  }"]
