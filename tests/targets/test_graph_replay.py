"""A repeated call whose host program launches more kernels than a LaunchRecord keeps (a host
loop of stencil time steps) replays them as one CUDA graph (stand-in module and capture, no GPU)."""
import polyopt as po
from polyopt.targets import cuda
from polyopt.targets.cuda import MAX_RECORDED_LAUNCHES, GraphReplay

from conftest import StandInArray, StandInModule, capture_graphs_on


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
    replay = GraphReplay(compiled, params)
    for _ in range(3):
        replay(arrays)
    assert captures == [direct] and module.launched == direct * 3  # captured once, replayed each call
    replay({"A": StandInArray((30,), 1024), "B": StandInArray((30,), 512)})
    assert len(captures) == 2  # other arrays: a graph of their own
