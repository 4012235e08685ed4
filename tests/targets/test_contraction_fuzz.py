"""Property tests on a GPU: random two-operand contractions -- batch, free and contracted index
groups of one or two labels each, in random orders in each operand (strided groups), ragged
extents across the tiles' edges -- in f64, f32 (exact and TF32), f16 and bf16, each launch forced
onto a random contraction kernel among those that can run it (``mma.sync``, ``cp.async``,
``wgmma``, TMA, split K...), against numpy's float64 einsum with a tolerance for the precision.
The operands are PyTorch CUDA tensors (the library call's path, and bfloat16's: CuPy has none).

Longer local runs: ``POLYOPT_GPU_FUZZ_EXAMPLES=2000 python -m pytest
tests/targets/test_contraction_fuzz.py``."""
import os
import string

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, event, given, settings, strategies as st

import polyopt as po
from polyopt import einsum_calls
from polyopt.targets import contraction
from polyopt.targets.cuda import CudaKernel

from conftest import contraction_kernel_unfit, needs_gpu

GPU_FUZZ_EXAMPLES = int(os.environ.get("POLYOPT_GPU_FUZZ_EXAMPLES", "24"))  # (each a new CUDA module)
#: Largest error allowed, as a fraction of the largest sum of |products| (the error bound's
#: scale): f32 sums in another order; TF32 rounds the operands to 10-bit mantissas; a half result
#: is rounded once to its type (11 and 8 bits).
TOLERANCE = {("float64", "exact"): 1e-12, ("float32", "exact"): 1e-5, ("float32", "tf32"): 4e-3,
             ("float16", "exact"): 2e-3, ("bfloat16", "exact"): 1e-2}


_MODES = sorted(TOLERANCE)


@st.composite
def contractions(draw):
    """(subscripts, operand shapes, dtype name, precision)."""
    labels = iter(string.ascii_lowercase)
    groups = {role: [next(labels) for _ in range(draw(st.integers(low, 2)))]
              for role, low in (("batch", 0), ("m", 1), ("n", 1), ("k", 1))}
    sizes = {}
    for role, group in groups.items():
        largest = 4 if role == "batch" else 140 if len(group) == 1 else 20
        sizes.update({label: draw(st.integers(1, largest)) for label in group})
    left = draw(st.permutations(groups["batch"] + groups["m"] + groups["k"]))
    right = draw(st.permutations(groups["batch"] + groups["k"] + groups["n"]))
    out = draw(st.permutations(groups["batch"] + groups["m"] + groups["n"]))
    dtype, precision = draw(st.sampled_from(_MODES))
    subscripts = f"{''.join(left)},{''.join(right)}->{''.join(out)}"
    return subscripts, [tuple(sizes[c] for c in left), tuple(sizes[c] for c in right)], dtype, precision


def _operand(shape: tuple, dtype: str, rng):
    """A CUDA tensor of ``dtype`` of values in [-1, 1]."""
    torch = pytest.importorskip("torch")
    return torch.as_tensor(rng.uniform(-1, 1, shape)).to(getattr(torch, dtype)).cuda()


def _forcing(pick: int, taken: list):
    """A contraction chooser taking kernel ``pick`` (modulo their number) among those of the
    source that can run the launch, noting its name in ``taken``."""
    chooser = contraction.choose_kernel

    def forced(source, extent, shapes, sm_count, aligned_operands=True, wgmma=False, tma=False, clusters=False,
               half=False):
        fits = []
        for name, variant in source.variants:
            layout = contraction.launch_layout(source.contraction, variant, extent, shapes)
            if not contraction_kernel_unfit(source, variant, layout, aligned_operands, wgmma, tma, clusters):
                fits.append((name, variant, layout))
        if not fits:
            return chooser(source, extent, shapes, sm_count, aligned_operands, wgmma, tma, clusters, half)
        chosen = fits[pick % len(fits)]
        taken.append(chosen[0])
        return chosen
    return forced


@needs_gpu
@settings(max_examples=GPU_FUZZ_EXAMPLES, deadline=None, derandomize=True, database=None,
          phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=contractions(), pick=st.integers(0, 1000), seed=st.integers(0, 2**16))
def test_random_contractions_on_forced_kernels_match_numpy(case, pick, seed):
    subscripts, shapes, dtype, precision = case
    rng = np.random.default_rng(seed)
    a, b = (_operand(shape, dtype, rng) for shape in shapes)
    exact = [t.double().cpu().numpy() for t in (a, b)]
    expected = np.einsum(subscripts, *exact)
    scale = max(float(np.einsum(subscripts, *map(np.abs, exact)).max()), 1.0)
    taken = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(contraction, "choose_kernel", _forcing(pick, taken))
        patch.setattr(CudaKernel, "recorded", lambda self, key: None)  # (no replay of another kernel's launches)
        einsum_calls.clear()
        got = po.einsum(subscripts, a, b, precision=precision).double().cpu().numpy()
    for name in taken:
        event(f"{dtype} {precision}: {name}")
    error = float(np.abs(got - expected).max()) if expected.size else 0.0
    assert error <= TOLERANCE[dtype, precision] * scale, (subscripts, shapes, dtype, precision, taken)
