"""A repeated call whose host program launches more kernels than a LaunchRecord keeps (a host
loop of stencil time steps) replays them as one CUDA graph (stand-in module and capture, no GPU)."""
import subprocess
import sys
import textwrap

import polyopt as po
from polyopt.targets import cuda
from polyopt.targets.cuda import MAX_RECORDED_LAUNCHES, GraphReplay

from conftest import StandInArray, StandInModule, capture_graphs_on, needs_gpu


def test_a_call_of_many_launches_replays_one_graph(monkeypatch):
    compiled = po.compile(po.suite.get("jacobi-1d").kernel, target="cuda", time_tile=False)
    params = {"TSTEPS": 40, "N": 30}
    arrays = {"A": StandInArray((30,), 256), "B": StandInArray((30,), 512)}
    module = StandInModule(leading=len(params) + len(arrays))
    monkeypatch.setattr(cuda, "_raw_module", lambda source: module)
    assert compiled.launch(params, {}, arrays, record=True) is None  # 80 launches: not recorded
    direct, module.launched = module.launched, []
    assert len(direct) == 80 > MAX_RECORDED_LAUNCHES
    captures = capture_graphs_on(monkeypatch, module, compiled)
    replay = GraphReplay.of(compiled, params)
    assert replay.arrays == ("A", "B") and replay.scalars == () and replay.written == {"A", "B"}
    for _ in range(3):
        replay(arrays)
    assert captures == [direct] and module.launched == direct * 3  # captured once, replayed each call
    replay({"A": StandInArray((30,), 1024), "B": StandInArray((30,), 512)})
    assert len(captures) == 2  # other arrays: a graph of their own


@needs_gpu
def test_graph_replays_on_freed_and_new_arrays_in_a_child_process():
    """Repeated calls whose host program replays a CUDA graph (jacobi-1d's 2 x TSTEPS launches),
    with the arrays freed and made again between calls (so new arrays may land at the addresses
    of freed ones, with other sizes too), each call checked against the numpy reference, in a
    child process: a graph that outlived its arrays would crash it or give wrong values."""
    program = textwrap.dedent("""
        import gc
        import cupy, numpy as np
        import polyopt as po
        entry = po.suite.get("jacobi-1d")
        compiled = po.compile(entry.kernel, target="cuda", time_tile=False)
        for round_ in range(12):
            sizes = {"TSTEPS": 40, "N": (300, 301, 300, 4096)[round_ % 4]}
            args = entry.inputs(sizes)
            expected = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()}
            device = {k: (cupy.asarray(v) if isinstance(v, np.ndarray) else v) for k, v in args.items()}
            for call in range(2):
                compiled(**device)
                entry.reference(**expected)
            for k, v in device.items():
                if isinstance(v, cupy.ndarray):
                    np.testing.assert_allclose(v.get(), expected[k], rtol=1e-12, err_msg=f"{round_} {k}")
            del device, args
            gc.collect()
            cupy.get_default_memory_pool().free_all_blocks()
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]
