"""Random sequences of schedule primitives for the property tests (tests/transform/test_trace.py
on the CPU and nvcc, tests/targets/test_gpu_random_nests.py on a GPU): loop handles, sizes and
``within=`` drawn from the schedule at hand; refused steps (ScheduleError, IllegalScheduleError)
are skipped and counted."""
from __future__ import annotations

from hypothesis import event
from hypothesis import strategies as st

import polyopt as po

REFUSED = (po.ScheduleError, po.IllegalScheduleError)

PRIMITIVE_NAMES = ("tile", "split", "interchange", "permute", "skew", "shift", "reverse", "fuse",
                   "distribute", "wavefront", "parallel", "vectorize", "unroll", "register_tile",
                   "gpu_map", "gpu_promote")


def within_statements(draw, loop):
    """None, or a random non-empty subset of the statements the loop runs."""
    if len(loop.statements) < 2 or draw(st.booleans()):
        return None
    return draw(st.lists(st.sampled_from(loop.statements), min_size=1, unique=True))


def nest_of(draw, s, count: int):
    """``count`` loops around one statement, consecutive, outermost first (or fewer there)."""
    statement = draw(st.sampled_from([stmt.name for stmt in s.scop.statements]))
    around = s.loops(statement)
    if not around:
        return ()
    count = min(count, len(around))
    start = draw(st.integers(0, len(around) - count))
    return around[start:start + count]


def random_step(draw, s):
    """(primitive, loops, options) drawn for schedule ``s``, handles from its loops."""
    primitive = draw(st.sampled_from(PRIMITIVE_NAMES))
    every = s.loops()
    if not every:
        return primitive, (), {}
    one = draw(st.sampled_from(every))
    if primitive == "tile":
        loops = nest_of(draw, s, draw(st.integers(1, 3)))
        size = st.integers(1, 6)
        sizes = draw(st.one_of(size, st.lists(size, min_size=len(loops), max_size=len(loops)),
                               st.lists(st.lists(size, min_size=len(loops), max_size=len(loops)),
                                        min_size=2, max_size=2).map(lambda levels: [[a * b for a, b in zip(*levels)],
                                                                                    levels[1]])))
        return primitive, loops, {"sizes": sizes, "within": within_statements(draw, loops[0]) if loops else None}
    if primitive == "split":
        return primitive, (one,), {"factor": draw(st.integers(1, 5)), "within": within_statements(draw, one)}
    if primitive in ("interchange", "skew", "wavefront"):
        loops = nest_of(draw, s, 3)
        if len(loops) < 2:
            return primitive, (one, one), {}
        a, b = sorted(draw(st.lists(st.integers(0, len(loops) - 1), min_size=2, max_size=2, unique=True)))
        options = {}
        if primitive == "skew":
            options["factor"] = draw(st.sampled_from([1, 1, 2, -1]))
        options["within"] = within_statements(draw, loops[a])
        return primitive, (loops[a], loops[b]), options
    if primitive == "permute":
        loops = list(nest_of(draw, s, 3))
        draw(st.randoms(use_true_random=False)).shuffle(loops)
        return primitive, tuple(loops), {"within": within_statements(draw, loops[0]) if loops else None}
    if primitive == "shift":
        return primitive, (one,), {"offset": draw(st.integers(-3, 3)), "within": within_statements(draw, one)}
    if primitive == "reverse":
        return primitive, (one,), {"within": within_statements(draw, one)}
    if primitive == "fuse":
        loops = draw(st.lists(st.sampled_from(every), min_size=2, max_size=3))  # repeats: refused
        return primitive, tuple(loops), {"depth": draw(st.integers(1, 2))}
    if primitive == "distribute":
        groups = None
        if len(one.statements) > 1 and draw(st.booleans()):
            order = list(one.statements)
            draw(st.randoms(use_true_random=False)).shuffle(order)
            cut = draw(st.integers(1, len(order) - 1))
            groups = [order[:cut], order[cut:]]
        return primitive, (one,), {"groups": groups}
    if primitive == "unroll":
        return primitive, (one,), {"factor": draw(st.sampled_from([None, 2, 3, 4])), "within": within_statements(draw, one)}
    if primitive == "register_tile":
        loops = nest_of(draw, s, 2)
        return primitive, loops, {"sizes": draw(st.lists(st.integers(1, 4), min_size=len(loops),
                                                          max_size=len(loops))),
                                  "within": within_statements(draw, loops[0]) if loops else None}
    if primitive == "gpu_map":
        loops = nest_of(draw, s, draw(st.integers(1, 3)))
        return primitive, loops, {"within": within_statements(draw, loops[0]) if loops else None}
    if primitive == "gpu_promote":
        arrays = draw(st.lists(st.sampled_from([a for a in s.scop.arrays if not s.scop.arrays[a].local]),
                               min_size=1, unique=True))
        return primitive, (one,), {"arrays": arrays, "to": draw(st.sampled_from(["shared", "registers", "global"]))}
    return primitive, (one,), {"within": within_statements(draw, one)}  # parallel, vectorize


def apply_random_steps(draw, s):
    """Up to 4 random steps on ``s``; each refused one is skipped. Returns the last schedule
    and the number of steps that were carried out."""
    done = 0
    for _ in range(draw(st.integers(1, 4))):
        primitive, loops, options = random_step(draw, s)
        try:
            s = getattr(s, primitive)(*loops, **{k: v for k, v in options.items() if v is not None})
        except REFUSED as exc:
            event(f"{primitive} refused: {type(exc).__name__}")
            continue
        event(f"{primitive} applied")
        done += 1
    return s, done


