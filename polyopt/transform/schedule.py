"""The :class:`Schedule` value a user steers, its :class:`Loop` handles, and read-only views of
schedule trees (indented text, shape statistics).

A Schedule is immutable: every primitive (``tile``, ``interchange``, ``skew``, ``fuse``,
``parallel``, ...) returns a new one with one more :class:`~polyopt.transform.trace.Step` in its
trace, after the independent verifier has checked it (:mod:`polyopt.transform.primitives`).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Sequence as Seq

import islpy as isl

from polyopt.analysis.scop import Scop, scop_fingerprint
from polyopt.islutil import ISL_LOCK
from polyopt.transform import nodes as N
from polyopt.transform import primitives as P
from polyopt.transform.scalar_expansion import expand_scalars
from polyopt.transform.trace import Step, Trace


@dataclass(frozen=True)
class Loop:
    """A handle on one loop of a schedule: its name, stable across the steps that keep the loop
    (``tile`` replaces loop ``i`` by ``i_0`` and ``i_1``), and the kernel it belongs to."""

    name: str
    kernel: str = field(compare=False, repr=False, default="")
    statements: tuple[str, ...] = field(compare=False, default=())

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, eq=False)
class Schedule:
    """A schedule of a Scop: a tree of loops (bands), sequences and marks over its statement
    instances, the :class:`~polyopt.transform.trace.Trace` of steps that made it, the algorithm
    and options it started from, and the scheduler's ``notes`` (fallbacks it took: ``"pluto: no
    legal hyperplane for S0, S1; ... dimension 0 of the original schedule"``; dependences that are
    memory-based approximations: ``"dependences: RAW on A: memory-based ..."``).

    ``s.loops("S1")`` gives the loops around a statement; each primitive takes loop handles (or
    their names) and keyword options and returns a new Schedule. The examples of the primitives
    below (doctests, run by tests/transform/test_doctests.py) use five small DSL kernels:
    ``scale`` (``A[i, j] = 2 * A[i, j]`` over i, j), ``sweep`` (``A[t, i] = A[t - 1, i] + A[t,
    i - 1]`` over t, i), ``pair`` (one loop i: ``B[i] = 2 * A[i]; C[i] = B[i] + 1``), ``apart``
    (the same as two loops) and ``mm`` (``C[i, j] += A[i, k] * B[k, j]`` over i, k, j)::

        s = po.schedule(gemm, "original")
        i, j, k = s.loops("S1")
        s = s.tile(i, j, k, sizes=(32, 32, 32)).parallel("i_0")
        print(s.trace.as_python())
    """

    scop: Scop
    domain: isl.UnionSet
    root: N.Node
    algorithm: str = "original"
    options: dict = field(default_factory=dict)
    trace: Trace = field(default_factory=Trace)
    notes: tuple[str, ...] = ()
    cost: tuple = ()  # the cost model's estimates per band (polyopt.schedulers.cost.BandCost)

    # ----- construction --------------------------------------------------------------------------
    @staticmethod
    def original(scop: Scop) -> "Schedule":
        """The loops as written (the Scop's original schedule), with an empty trace."""
        domain, root = N.from_isl(scop.schedule, scop)
        return Schedule(scop, domain, root)

    @staticmethod
    def from_tree(scop: Scop, tree: isl.Schedule, *, algorithm: str, options: dict | None = None,
                  notes: tuple[str, ...] = (), note: str = "") -> "Schedule":
        """A schedule made elsewhere (isl's scheduler, an imported file): the original schedule
        with one ``affine_schedule`` step that sets ``tree`` (replayable, like any step)."""
        start = Schedule.original(scop)
        made = P.run(start, "affine_schedule", (), check=False, note=note, tree=P.tree_spec(N.from_isl(tree, scop)[1]))
        return replace(made, algorithm=algorithm, options=dict(options or {}), notes=tuple(notes))

    def derive(self, root: N.Node, step: Step, scop: Scop | None = None) -> "Schedule":
        """A new schedule with ``root`` as its tree and ``step`` appended to the trace (and
        ``scop`` as its Scop, where the step changed it: ``expand_scalars``)."""
        return replace(self, root=root, trace=self.trace.appended(step), scop=self.scop if scop is None else scop)

    def apply_step(self, step: Step, *, check: bool = True) -> "Schedule":
        """This schedule with ``step`` applied (what :meth:`Trace.apply` does for each step)."""
        return P.run(self, step.primitive, step.loops, check=check, note=step.note, **step.kwargs)

    # ----- views ---------------------------------------------------------------------------------
    @cached_property
    def tree(self) -> isl.Schedule:
        """The isl schedule tree (what code generation and the verifier read)."""
        return N.to_isl(self.domain, self.root)

    @property
    def map(self) -> isl.UnionMap:
        """The flat schedule: statement instances -> time vectors (lexicographic order)."""
        tree = self.tree  # (a tree's map is not restricted to the tree's own domain)
        return tree.get_map().intersect_domain(tree.get_domain()).intersect_domain(self.scop.domain)

    def loops_c(self) -> str:
        """The loop structure as isl prints it (statement calls only), for a quick look."""
        build = isl.AstBuild.from_context(self.scop.context)
        return build.node_from_schedule(self.tree).to_C_str().rstrip("\n")

    def __str__(self) -> str:
        return str(self.tree)

    def pretty(self) -> str:
        """The schedule tree, one node per line, indented by depth, loops with their names."""
        return P.pretty(self)

    # ----- loop handles --------------------------------------------------------------------------
    def loops(self, statement: str | None = None) -> tuple[Loop, ...]:
        """The loops around ``statement`` (outermost first); without it, every loop of the tree
        in order (outer first, nests in textual order)."""
        return tuple(self._handle(name) for name in P.loop_names_of(self, statement))

    def loop(self, name: str) -> Loop:
        """The handle of the loop called ``name``."""
        P.find(self, name)
        return self._handle(name)

    def _handle(self, name: str) -> Loop:
        return Loop(name, scop_fingerprint(self.scop), P.loop_statements(self, name))

    # ----- primitives (each checked by the verifier; see polyopt.transform.primitives) ------------
    def tile(self, *loops: Loop | str, sizes: int | Seq[int] | Seq[Seq[int]],
             within: Seq[str] | None = None) -> "Schedule":
        """Rectangular tiling of consecutive loops of one band (or of directly nested bands);
        ``sizes``: one int, one per loop, or a list of such lists for several levels (outer first).
        Loop ``x`` becomes ``x_0`` (the tiles) and ``x_1`` (inside a tile), with more levels
        ``x_0, x_1, x_2``; refused (IllegalScheduleError) where the tiles would break a dependence.
        With ``within=`` (statement names) only those statements' loops are tiled: where the loops
        also run others, a ``distribute`` step first gives the named statements a copy of their own
        (statement order kept), and the tiling applies to that copy (loops ``i@S1``, ...):

        >>> s = po.schedule(scale, "original")
        >>> print(s.loops_c())
        for (int c0 = 0; c0 < N; c0 += 1)
          for (int c1 = 0; c1 < N; c1 += 1)
            S0(c0, c1);
        >>> print(s.tile("i", "j", sizes=32).loops_c())
        for (int c0 = 0; c0 < N; c0 += 32)
          for (int c1 = 0; c1 < N; c1 += 32)
            for (int c2 = 0; c2 <= min(31, N - c0 - 1); c2 += 1)
              for (int c3 = 0; c3 <= min(31, N - c1 - 1); c3 += 1)
                S0(c0 + c2, c1 + c3);
        """
        return P.run(self, "tile", loops, sizes=sizes, within=within)

    def split(self, loop: Loop | str, *, factor: int, within: Seq[str] | None = None) -> "Schedule":
        """Strip-mine one loop: ``x`` becomes ``x_0`` (steps of ``factor``) and ``x_1`` (inside one);
        ``within=`` distributes first as :meth:`tile` does:

        >>> s = po.schedule(scale, "original")
        >>> print(s.loops_c())
        for (int c0 = 0; c0 < N; c0 += 1)
          for (int c1 = 0; c1 < N; c1 += 1)
            S0(c0, c1);
        >>> print(s.split("j", factor=4).loops_c())
        for (int c0 = 0; c0 < N; c0 += 1)
          for (int c1 = 0; c1 < N; c1 += 4)
            for (int c2 = 0; c2 <= min(3, N - c1 - 1); c2 += 1)
              S0(c0, c1 + c2);
        >>> s = po.schedule(pair, "original").split("i", factor=4, within=["S1"])
        >>> print(s.trace.as_python())
        # for split('i', factor=4, within=['S1'])
        s = s.distribute('i', groups=[['S0'], ['S1']])
        s = s.split('i@S1', factor=4)
        >>> print(s.loops_c())
        {
          for (int c0 = 0; c0 < N; c0 += 1)
            S0(c0);
          for (int c0 = 0; c0 < N; c0 += 4)
            for (int c1 = 0; c1 <= min(3, N - c0 - 1); c1 += 1)
              S1(c0 + c1);
        }
        """
        return P.run(self, "split", (loop,), factor=factor, within=within)

    def interchange(self, a: Loop | str, b: Loop | str, *, within: Seq[str] | None = None) -> "Schedule":
        """Swap two loops of one band (or of directly nested bands); with ``within=``, for those
        statements only:

        >>> s = po.schedule(scale, "original")
        >>> print(s.loops_c())
        for (int c0 = 0; c0 < N; c0 += 1)
          for (int c1 = 0; c1 < N; c1 += 1)
            S0(c0, c1);
        >>> print(s.interchange("i", "j").loops_c())
        for (int c0 = 0; c0 < N; c0 += 1)
          for (int c1 = 0; c1 < N; c1 += 1)
            S0(c1, c0);
        """
        return P.run(self, "interchange", (a, b), within=within)

    def permute(self, *loops: Loop | str, within: Seq[str] | None = None) -> "Schedule":
        """Reorder loops of one band (or of directly nested bands): the positions of ``loops``
        take them in the given order (``permute(k, i)`` on (i, j, k) gives (k, j, i)):

        >>> s = po.schedule(mm, "original")
        >>> print(s.loops_c())
        for (int c0 = 0; c0 < N; c0 += 1)
          for (int c1 = 0; c1 < N; c1 += 1)
            for (int c2 = 0; c2 < N; c2 += 1)
              S0(c0, c1, c2);
        >>> print(s.permute("i", "j", "k").loops_c())
        for (int c0 = 0; c0 < N; c0 += 1)
          for (int c1 = 0; c1 < N; c1 += 1)
            for (int c2 = 0; c2 < N; c2 += 1)
              S0(c0, c2, c1);
        """
        return P.run(self, "permute", loops, within=within)

    def skew(self, outer: Loop | str, inner: Loop | str, *, factor: int = 1,
             within: Seq[str] | None = None) -> "Schedule":
        """``inner`` becomes ``inner + factor * outer`` (of the statements ``within``, default all):

        >>> s = po.schedule(sweep, "original")
        >>> print(s.loops_c())
        for (int c0 = 1; c0 < T; c0 += 1)
          for (int c1 = 1; c1 < N; c1 += 1)
            S0(c0, c1);
        >>> print(s.skew("t", "i").loops_c())
        for (int c0 = 1; c0 < T; c0 += 1)
          for (int c1 = c0 + 1; c1 < N + c0; c1 += 1)
            S0(c0, -c0 + c1);
        """
        return P.run(self, "skew", (outer, inner), factor=factor, within=within)

    def shift(self, loop: Loop | str, *, offset: int, within: Seq[str] | None = None) -> "Schedule":
        """Add ``offset`` to the loop's value (of the statements ``within``, default all):

        >>> s = po.schedule(apart, "original")
        >>> print(s.loops_c())
        {
          for (int c0 = 0; c0 < N; c0 += 1)
            S0(c0);
          for (int c0 = 0; c0 < N; c0 += 1)
            S1(c0);
        }
        >>> print(s.shift("i@S1", offset=1).loops_c())
        {
          for (int c0 = 0; c0 < N; c0 += 1)
            S0(c0);
          for (int c0 = 1; c0 <= N; c0 += 1)
            S1(c0 - 1);
        }
        """
        return P.run(self, "shift", (loop,), offset=offset, within=within)

    def reverse(self, loop: Loop | str, *, within: Seq[str] | None = None) -> "Schedule":
        """Run the loop backwards (its value negated; of the statements ``within``, default all):

        >>> s = po.schedule(scale, "original")
        >>> print(s.loops_c())
        for (int c0 = 0; c0 < N; c0 += 1)
          for (int c1 = 0; c1 < N; c1 += 1)
            S0(c0, c1);
        >>> print(s.reverse("j").loops_c())
        for (int c0 = 0; c0 < N; c0 += 1)
          for (int c1 = -N + 1; c1 <= 0; c1 += 1)
            S0(c0, -c1);
        """
        return P.run(self, "reverse", (loop,), within=within)

    def fuse(self, *loops: Loop | str, depth: int = 1) -> "Schedule":
        """Fuse the loops heading consecutive nests of one sequence into one loop (``depth``: how
        many levels, the fusion point). It takes no ``within=``: the loops it names choose the
        statements:

        >>> s = po.schedule(apart, "original")
        >>> print(s.loops_c())
        {
          for (int c0 = 0; c0 < N; c0 += 1)
            S0(c0);
          for (int c0 = 0; c0 < N; c0 += 1)
            S1(c0);
        }
        >>> print(s.fuse("i", "i@S1").loops_c())
        for (int c0 = 0; c0 < N; c0 += 1) {
          S0(c0);
          S1(c0);
        }
        """
        return P.run(self, "fuse", loops, depth=depth)

    def distribute(self, loop: Loop | str, *, groups: Seq[Seq[str]] | None = None) -> "Schedule":
        """Split a loop (and the loops inside it in its band) into one copy per group of
        statements, in order (default: one per statement or per nest below); a copy's loops are
        renamed where their names are taken (``i@S1``). It takes no ``within=``: ``groups=``
        names the statements of each copy:

        >>> s = po.schedule(pair, "original")
        >>> print(s.loops_c())
        for (int c0 = 0; c0 < N; c0 += 1) {
          S0(c0);
          S1(c0);
        }
        >>> print(s.distribute("i").loops_c())
        {
          for (int c0 = 0; c0 < N; c0 += 1)
            S0(c0);
          for (int c0 = 0; c0 < N; c0 += 1)
            S1(c0);
        }
        """
        return P.run(self, "distribute", (loop,), groups=groups)

    def wavefront(self, outer: Loop | str, inner: Loop | str, *, within: Seq[str] | None = None) -> "Schedule":
        """``outer`` becomes ``outer + inner``: a wavefront; with both loops' dependences
        non-negative, ``inner`` is then parallel (mark it with :meth:`parallel`, which is checked);
        ``within=`` distributes first as :meth:`tile` does:

        >>> s = po.schedule(sweep, "original")
        >>> print(s.loops_c())
        for (int c0 = 1; c0 < T; c0 += 1)
          for (int c1 = 1; c1 < N; c1 += 1)
            S0(c0, c1);
        >>> print(s.wavefront("t", "i").loops_c())
        for (int c0 = 2; c0 < N + T - 1; c0 += 1)
          for (int c1 = max(1, -T + c0 + 1); c1 < min(N, c0); c1 += 1)
            S0(c0 - c1, c1);
        """
        return P.run(self, "wavefront", (outer, inner), within=within)

    def parallel(self, loop: Loop | str, *, within: Seq[str] | None = None) -> "Schedule":
        """Run the loop's iterations on a thread team: a ``parallel`` mark above it (refused,
        RacyParallelLoopError, if it carries a dependence; nested teams are refused too); with
        ``within=``, the named statements' copy of the loop after a ``distribute`` step (as
        :meth:`tile` does):

        >>> print(po.schedule(scale, "original").parallel("i").pretty())
        mark parallel
          band (i)
            i = [N] -> { S0[i, j] -> [(i)] }
            band (j)
              j = [N] -> { S0[i, j] -> [(j)] }
        >>> print(po.schedule(pair, "original").parallel("i", within=["S1"]).pretty())
        sequence
          filter [N] -> { S0[i] }
            band (i)  [permutable; coincident: i]
              i = [N] -> { S0[i] -> [(i)] }
          filter [N] -> { S1[i] }
            mark parallel
              band (i@S1)  [permutable; coincident: i@S1]
                i@S1 = [N] -> { S1[i] -> [(i)] }
        """
        return P.run(self, "parallel", (loop,), within=within)

    def vectorize(self, loop: Loop | str, *, within: Seq[str] | None = None) -> "Schedule":
        """Make the loop the innermost of its (innermost) band, for LLVM's vectorizer; refused if
        it carries a dependence there; ``within=`` distributes first as :meth:`tile` does:

        >>> s = po.schedule(mm, "original")
        >>> print(s.loops_c())
        for (int c0 = 0; c0 < N; c0 += 1)
          for (int c1 = 0; c1 < N; c1 += 1)
            for (int c2 = 0; c2 < N; c2 += 1)
              S0(c0, c1, c2);
        >>> print(s.vectorize("j").loops_c())
        for (int c0 = 0; c0 < N; c0 += 1)
          for (int c1 = 0; c1 < N; c1 += 1)
            for (int c2 = 0; c2 < N; c2 += 1)
              S0(c0, c1, c2);
        """
        return P.run(self, "vectorize", (loop,), within=within)

    def gpu_map(self, *loops: Loop | str, within: Seq[str] | None = None) -> "Schedule":
        """One CUDA kernel whose block/thread coordinates are ``loops`` (consecutive loops, one to
        three, the last one threadIdx.x); the loops outside run on the host, those inside in each
        thread. Each coordinate gets a band under ``gpu_block``/``gpu_thread`` marks, which the
        verifier checks (RacyParallelLoopError for a coordinate that carries a dependence);
        ``within=`` distributes first as :meth:`tile` does:

        >>> print(po.schedule(scale, "original").gpu_map("i", "j").pretty())
        mark gpu_block
          mark gpu_thread
            band (i)  [coincident: i]
              i = [N] -> { S0[i, j] -> [(i)] }
              mark gpu_block
                mark gpu_thread
                  band (j)  [coincident: j]
                    j = [N] -> { S0[i, j] -> [(j)] }
        """
        return P.run(self, "gpu_map", loops, within=within)

    def gpu_contract(self, *, precision: str = "exact") -> "Schedule":
        """The Scop's contraction (an update summing a product of two array elements over the
        indices the output lacks: matmul, batched matmul, einsum, 1x1 convolution) as one CUDA
        kernel: every output index a block/thread coordinate, in each thread the init statement
        and the K loops (the schedule's loops are replaced). As the last step, the CUDA target
        emits it as a batched GEMM -- tiles chosen at each launch, tensor cores for f64, f16 and
        bf16 operands, and for f32 with ``precision="tf32"`` -- which is what a default CUDA
        compile of a contraction does:

        >>> s = po.schedule(mm, "original").gpu_contract(precision="tf32")
        >>> print(s.trace.as_python())
        s = s.gpu_contract(precision='tf32')
        >>> print(s.pretty())
        mark gpu_block
          mark gpu_thread
            band (i)  [coincident: i]
              i = [N] -> { S0[i, k, j] -> [(i)] : 0 <= i < N and 0 <= k < N and 0 <= j < N }
              mark gpu_block
                mark gpu_thread
                  band (j)  [coincident: j]
                    j = [N] -> { S0[i, k, j] -> [(j)] : 0 <= i < N and 0 <= k < N and 0 <= j < N }
                    band (k)
                      k = [N] -> { S0[i, k, j] -> [(k)] : 0 <= i < N and 0 <= k < N and 0 <= j < N }
        """
        return P.run(self, "gpu_contract", (), precision=precision)

    def gpu_time_tile(self, *, steps: int | None = None, tile: int | Seq[int] | None = None,
                      block: int | Seq[int] | None = None) -> "Schedule":
        """The Scop's Jacobi-style stencil (:func:`~polyopt.analysis.stencil.find_stencil`:
        jacobi-1d/2d, fdtd-2d, heat-3d) in overlapped time tiles on the GPU: each launch runs
        ``steps`` time steps, each thread block one output ``tile`` (per spatial dimension,
        outermost first) from a region grown by the halo in shared memory, with ``block``
        threads; None leaves the choice to the CUDA target
        (:func:`~polyopt.codegen.cuda_stencil.time_tiling`). The order stays the original one,
        which is what the schedule must have. As the last step, the CUDA target emits the
        overlapped-tile kernel, as a default CUDA compile of a 1-d or 2-d stencil does:

        >>> s = po.schedule(po.suite.get("jacobi-2d").kernel, "original").gpu_time_tile(steps=4, tile=(16, 64))
        >>> print(s.trace.as_python())
        s = s.gpu_time_tile(steps=4, tile=[16, 64])
        """
        return P.run(self, "gpu_time_tile", (), steps=steps, tile=tile, block=block)

    def gpu_resident(self) -> "Schedule":
        """The Scop's Jacobi-style stencil of spatial rank 2 or 3 (jacobi-2d, fdtd-2d, heat-3d)
        also as one cooperative CUDA launch running every time step, each thread block's strip
        of rows of the written arrays resident in shared memory; the CUDA target launches it
        where the strips fit the GPU's shared memory, else the kernels this schedule maps. The
        resident kernel runs the original order's sweeps (per time step, each statement's
        sweep in program order), whatever order the schedule has. As the last step, the CUDA
        target adds the resident kernel, as a default CUDA compile of such a stencil does:

        >>> s = po.schedule(po.suite.get("jacobi-2d").kernel, "original").gpu_resident()
        >>> print(s.trace.as_python())
        s = s.gpu_resident()
        """
        return P.run(self, "gpu_resident", ())

    def gpu_promote(self, kernel: Loop | str, arrays: Seq[str], *, to: str) -> "Schedule":
        """Where the CUDA kernel whose outermost coordinate is loop ``kernel`` (see
        :meth:`gpu_map`) keeps ``arrays``: ``to="shared"`` stages tiles of these read-only arrays
        in shared memory (and no other array), ``"registers"`` keeps the elements its loops
        update in registers, ``"global"`` neither; arrays not named are placed as the backend
        chooses. A ``gpu_memory`` mark above the kernel records it; the CUDA backend raises
        CodegenError where it cannot place an array so (shared memory needs a register-tiled
        2-d kernel), never ignores it:

        >>> s = po.schedule(mm, "original").interchange("k", "j").gpu_map("i", "j")
        >>> s = s.gpu_promote("i", ["A", "B"], to="shared")
        >>> print(s.pretty())
        mark gpu_memory A=shared B=shared
          mark gpu_block
            mark gpu_thread
              band (i)  [coincident: i]
                i = [N] -> { S0[i, k, j] -> [(i)] }
                mark gpu_block
                  mark gpu_thread
                    band (j)  [coincident: j]
                      j = [N] -> { S0[i, k, j] -> [(j)] }
                      band (k)  [permutable]
                        k = [N] -> { S0[i, k, j] -> [(k)] }
        >>> print(s.gpu_promote("i", ["B"], to="global").trace.as_python())
        s = s.interchange('k', 'j')
        s = s.gpu_map('i', 'j')
        s = s.gpu_promote('i', arrays=['A', 'B'], to='shared')
        s = s.gpu_promote('i', arrays=['B'], to='global')
        """
        return P.run(self, "gpu_promote", (kernel,),
                     arrays=arrays if isinstance(arrays, str) else list(arrays), to=to)

    def unroll(self, loop: Loop | str, *, factor: int | None = None, within: Seq[str] | None = None) -> "Schedule":
        """Unroll the loop completely (when it runs at most 64 iterations), or by ``factor``
        (strip-mined: ``x_0`` steps by ``factor``, ``x_1`` is unrolled); ``within=`` distributes
        first as :meth:`tile` does:

        >>> s = po.schedule(scale, "original")
        >>> print(s.loops_c())
        for (int c0 = 0; c0 < N; c0 += 1)
          for (int c1 = 0; c1 < N; c1 += 1)
            S0(c0, c1);
        >>> print(s.unroll("j", factor=2).loops_c())
        for (int c0 = 0; c0 < N; c0 += 1)
          for (int c1 = 0; c1 < N; c1 += 2) {
            S0(c0, c1);
            if (N >= c1 + 2)
              S0(c0, c1 + 1);
          }
        """
        return P.run(self, "unroll", (loop,), factor=factor, within=within)

    def register_tile(self, *loops: Loop | str, sizes: Seq[int], within: Seq[str] | None = None) -> "Schedule":
        """Unroll-and-jam: tile ``loops`` of an innermost band by ``sizes`` and unroll the points
        of whole tiles (their accumulators stay in registers); the last loop is the vector loop.
        The parallel tile loops go outside the others, the points innermost; ``within=``
        distributes first as :meth:`tile` does:

        >>> s = po.schedule(mm, "original").register_tile("i", "j", sizes=(2, 4))
        >>> [loop.name for loop in s.loops("S0")]
        ['j_0', 'i_0', 'k', 'i_1', 'j_1']
        """
        return P.run(self, "register_tile", loops, sizes=sizes, within=within)

    def expand_scalars(self) -> "Schedule":
        """The same loops over the kernel with its local scalars expanded where that makes a loop
        of the original order parallel (:mod:`polyopt.transform.scalar_expansion`; ``po.schedule``
        starts with this step unless ``expand_scalars=False``): each live range of such a scalar
        becomes an array indexed by those loops' iterators, and the step's note says which.
        In deriche, ``ym1`` (one row's recurrence along ``j``) becomes ``ym1_0[i]``::

            s = po.schedule(deriche, "original").expand_scalars().parallel("i")
        """
        with ISL_LOCK:
            note = expand_scalars(self.scop).note
        return P.run(self, "expand_scalars", (), note=note)

    def affine_schedule(self, *, tree: dict) -> "Schedule":
        """Replace the whole tree by ``tree`` (the JSON form of :func:`~polyopt.transform.
        primitives.tree_spec`: bands of per-statement affine functions, sequences, marks): how a
        scheduler's hyperplanes enter a trace."""
        return P.run(self, "affine_schedule", (), tree=tree)


def format_tree(tree: isl.Schedule) -> str:
    """Indented text of a schedule tree (band / sequence / filter / ... nodes)."""
    lines: list[str] = []

    def visit(node: isl.ScheduleNode, depth: int) -> None:
        kind = node.get_type()
        pad = "  " * depth
        if kind == isl.schedule_node_type.band:
            flags = []
            if node.band_get_permutable():
                flags.append("permutable")
            coincident = [node.band_member_get_coincident(k) for k in range(node.band_n_member())]
            if any(coincident):
                flags.append("coincident=" + "".join("1" if c else "0" for c in coincident))
            lines.append(f"{pad}band {node.band_get_partial_schedule()}"
                         + (f"  [{', '.join(flags)}]" if flags else ""))
        elif kind == isl.schedule_node_type.filter:
            lines.append(f"{pad}filter {node.filter_get_filter()}")
        elif kind == isl.schedule_node_type.domain:
            lines.append(f"{pad}domain {node.domain_get_domain()}")
        elif kind == isl.schedule_node_type.mark:
            lines.append(f"{pad}mark {node.mark_get_id().get_name()}")
        elif kind != isl.schedule_node_type.leaf:
            lines.append(f"{pad}{str(kind).split('.')[-1]}")
        for k in range(node.n_children()):
            visit(node.child(k), depth + (0 if kind == isl.schedule_node_type.leaf else 1))

    visit(tree.get_root(), 0)
    return "\n".join(lines)



def tree_statistics(tree: isl.Schedule) -> dict[str, int]:
    """Shape of a schedule tree, for comparing schedulers.

    ``bands``: band nodes; ``permutable_depth``: most members of one permutable band (the tilable
    depth); ``parallel_loops``: coincident members over all bands; ``sequential_depth``: most
    non-coincident band members on one root-to-leaf path (the latency dimensions).
    """
    stats = {"bands": 0, "permutable_depth": 0, "parallel_loops": 0, "sequential_depth": 0}

    def visit(node: isl.ScheduleNode, sequential: int) -> None:
        if node.get_type() == isl.schedule_node_type.band:
            n = node.band_n_member()
            coincident = [node.band_member_get_coincident(k) for k in range(n)]
            stats["bands"] += 1
            stats["parallel_loops"] += sum(coincident)
            if node.band_get_permutable() or n == 1:
                stats["permutable_depth"] = max(stats["permutable_depth"], n)
            sequential += n - sum(coincident)
        if node.n_children() == 0:
            stats["sequential_depth"] = max(stats["sequential_depth"], sequential)
        for k in range(node.n_children()):
            visit(node.child(k), sequential)

    visit(tree.get_root(), 0)
    return stats
