"""JSCoP (Polly) and OpenSCoP (Pluto, Clan, Candl) export and import: round trips of every suite
kernel, refusals of files that do not describe the Scop, illegal schedules refused with the
verifier's witness, and imported schedules compiled against the interpreter."""
import copy
import re

import islpy as isl
import numpy as np
import pytest

import polyopt as po
from polyopt import f64
from polyopt.errors import ExchangeError
from polyopt.transform.marks import PARALLEL_MARK


@po.kernel
def prefix_sum(A: f64["N"]):
    for i in range(1, N):
        A[i] = A[i] + A[i - 1]


@po.kernel
def strided(A: f64["N"], B: f64["N"]):
    for i in range(1, N, 3):
        for j in range(N):
            B[j] = B[j] + A[i] * 0.5


def _round_trips(sched: po.Schedule) -> None:
    kernel = sched.scop
    for back in (po.schedule_from_jscop(kernel, po.to_jscop(sched)),
                 po.schedule_from_openscop(kernel, po.to_openscop(sched))):
        assert back.map.is_equal(sched.map), (back.algorithm, str(back.map), str(sched.map))


@pytest.mark.parametrize("name", po.suite.names())
def test_every_suite_kernel_round_trips(name):
    """JSCoP and OpenSCoP export -> import give the same schedule map, for the default (pluto)
    schedule and the original order."""
    scop = po.suite.get(name).kernel.scop
    for algorithm in ("pluto", "original"):
        _round_trips(po.schedule(scop, algorithm))


def test_tiled_and_strided_schedules_round_trip_through_local_dimensions():
    _round_trips(po.schedule(po.suite.get("gemm").kernel.scop, "pluto", tile=16))
    sched = po.schedule(strided.scop, "pluto")
    _round_trips(sched)
    text = po.to_openscop(sched)
    domain_sizes = text.split("DOMAIN\n", 1)[1].splitlines()[0].split()
    assert domain_sizes[2:5] == ["2", "0", "1"]          # i, j; one local dimension (i = 1 + 3e)


def test_jscop_has_pollys_layout():
    data = po.to_jscop(po.schedule(po.suite.get("gemm").kernel.scop, "pluto"))
    assert set(data) == {"name", "context", "arrays", "statements"}
    assert data["arrays"][0] == {"name": "C", "sizes": ["NI", "NJ"], "type": "double"}
    s1 = data["statements"][1]
    assert set(s1) == {"name", "domain", "schedule", "accesses"}
    assert s1["name"] == "S1" and isl.Map(s1["schedule"]).get_tuple_name(isl.dim_type.in_) == "S1"
    assert {a["kind"] for a in s1["accesses"]} == {"read", "write"}
    assert isl.Set(data["context"]).is_params()


def test_untiled_openscop_scattering_is_the_form_pluto_reads():
    """Equalities only, no local dimensions, one row per time dimension with -1 on it."""
    text = po.to_openscop(po.schedule(po.suite.get("gemm").kernel.scop, "pluto", model=False))
    assert text.startswith("<OpenScop>") and text.rstrip().endswith("</OpenScop>")
    for block in text.split("SCATTERING\n")[1:]:
        lines = [line for line in block.splitlines() if line and not line.startswith("#")]
        rows, columns, n_out, n_in, n_local, n_param = map(int, lines[0].split())
        assert n_local == 0 and rows == n_out and columns == n_out + n_in + n_param + 2
        matrix = [list(map(int, line.split())) for line in lines[1:rows + 1]]
        assert all(row[0] == 0 for row in matrix)
        assert [[v for v in row[1:n_out + 1] if v] for row in matrix] == [[-1]] * n_out
    assert "<arrays>\n# Number of arrays\n3\n1 C\n2 A\n3 B\n</arrays>" in text


def test_files_round_trip_and_the_trace_names_them(tmp_path):
    sched = po.schedule(po.suite.get("2mm").kernel.scop, "pluto")
    po.write_jscop(sched, tmp_path / "2mm.jscop")
    po.write_openscop(sched, tmp_path / "2mm.scop")
    from_jscop = po.schedule_from_jscop(sched.scop, tmp_path / "2mm.jscop")
    from_openscop = po.schedule_from_openscop(sched.scop, str(tmp_path / "2mm.scop"))
    for back, fmt in ((from_jscop, "jscop"), (from_openscop, "openscop")):
        assert back.map.is_equal(sched.map)
        assert back.algorithm == fmt and back.trace[0].note.startswith(fmt + "(") and "2mm." in back.trace[0].note


def test_a_hand_written_illegal_jscop_is_refused_with_the_witness():
    hand_written = {"name": "prefix_sum", "statements": [
        {"name": "S0", "domain": "[N] -> { S0[i] : 1 <= i < N }", "schedule": "[N] -> { S0[i] -> [-i] }"}]}
    with pytest.raises(po.IllegalScheduleError) as caught:
        po.schedule_from_jscop(prefix_sum, hand_written)
    error = caught.value
    assert error.kind == "RAW"
    assert re.search(r"witness \(N=\d+\): S0\(\d+\) must run before S0\(\d+\)", str(error)), str(error)
    assert error.source_time > error.sink_time


def test_a_hand_written_legal_jscop_is_marked_parallel_only_on_loops():
    """[0, j, i]: the constant first dimension is no loop and is never marked; j, which no
    dependence crosses, is; i (carrying the sums into B[j]) is not. A single loop carrying a
    dependence (prefix_sum) gets no mark."""
    data = po.to_jscop(strided)
    data["statements"][0]["schedule"] = "[N] -> { S0[i, j] -> [0, j, i] }"
    sched = po.schedule_from_jscop(strided, data)
    marked = re.findall(rf"mark {PARALLEL_MARK}\n\s*band (.*)", sched.pretty())
    assert len(marked) == 1 and marked[0].startswith("(j, i)")  # the loop of j, then i
    assert PARALLEL_MARK not in po.schedule_from_jscop(strided, data, parallel=False).pretty()
    sequential = po.schedule_from_jscop(prefix_sum, po.to_jscop(prefix_sum))
    assert PARALLEL_MARK not in sequential.pretty()


def test_jscop_that_does_not_describe_the_scop_is_refused_with_what_differs():
    good = po.to_jscop(po.schedule(po.suite.get("gemm").kernel.scop, "original"))
    gemm = po.suite.get("gemm").kernel

    renamed = copy.deepcopy(good)
    renamed["statements"][1]["name"] = "Stmt_for_body"
    with pytest.raises(ExchangeError, match=r"missing S1; not in the Scop Stmt_for_body"):
        po.schedule_from_jscop(gemm, renamed)

    narrower = copy.deepcopy(good)
    narrower["statements"][0]["domain"] = "[NI, NJ, NK] -> { S0[i, j] : 0 <= i < NI and 0 < j < NJ }"
    with pytest.raises(ExchangeError, match=r"statement S0: the file's domain differs .* only in the Scop"):
        po.schedule_from_jscop(gemm, narrower)

    other_access = copy.deepcopy(good)
    other_access["statements"][1]["accesses"][1]["relation"] = "[NI, NJ, NK] -> { S1[i, k, j] -> A[k, i] }"
    with pytest.raises(ExchangeError, match=r"statement S1: the file's reads .* imports schedules only"):
        po.schedule_from_jscop(gemm, other_access)

    other_context = copy.deepcopy(good)
    other_context["context"] = "[NI, NJ, NK] -> { : NI > 10 }"
    with pytest.raises(ExchangeError, match="the context .* excludes parameter values"):
        po.schedule_from_jscop(gemm, other_context)

    broken = copy.deepcopy(good)
    broken["statements"][0]["schedule"] = "{ S0[i, j] -> [i, "
    with pytest.raises(ExchangeError, match="cannot read the schedule of statement S0"):
        po.schedule_from_jscop(gemm, broken)

    relation = copy.deepcopy(good)
    relation["statements"][0]["schedule"] = "[NI, NJ, NK] -> { S0[i, j] -> [0, i, t, 0] : 0 <= t <= 1 }"
    with pytest.raises(ExchangeError, match="more than one time"):
        po.schedule_from_jscop(gemm, relation)


def test_openscop_that_does_not_describe_the_scop_is_refused_with_the_line():
    sched = po.schedule(po.suite.get("gemm").kernel.scop, "original")
    text = po.to_openscop(sched)
    with pytest.raises(ExchangeError, match=r"line \d+: the parameters \['NI', 'NJ', 'NK'\] are not atax's"):
        po.schedule_from_openscop(po.suite.get("atax").kernel, text)
    with pytest.raises(ExchangeError, match=r"line \d+: 3 statements, but gemm has 2 \(S0, S1\)"):
        po.schedule_from_openscop(sched.scop, text.replace("# Number of statements\n2", "# Number of statements\n3"))
    narrower = text.replace("DOMAIN\n4 7 2 0 0 3\n# e/i|    i    j   NI   NJ   NK |    1\n     1   -1    0    1    0    0   -1",
                            "DOMAIN\n4 7 2 0 0 3\n# e/i|    i    j   NI   NJ   NK |    1\n     1   -1    0    1    0    0   -2")
    assert narrower != text
    with pytest.raises(ExchangeError, match="statement S0: the file's domain differs"):
        po.schedule_from_openscop(sched.scop, narrower)
    short_row = text.replace("SCATTERING\n4 11 4 2 0 3", "SCATTERING\n4 12 4 2 0 3", 1)
    with pytest.raises(ExchangeError, match=r"line \d+: SCATTERING: the sizes line"):
        po.schedule_from_openscop(sched.scop, short_row)


def test_an_illegal_openscop_scattering_is_refused_with_the_witness():
    sched = po.schedule(prefix_sum.scop, "original")
    text = po.to_openscop(sched)
    scattering = text.split("SCATTERING\n", 1)[1].split("\n\n", 1)[0]
    reversed_time = scattering.replace("     0   -1    1    0    0", "     0   -1   -1    0    0")
    assert reversed_time != scattering
    with pytest.raises(po.IllegalScheduleError, match=r"witness \(N=\d+\): S0\(\d+\) must run before"):
        po.schedule_from_openscop(prefix_sum, text.replace(scattering, reversed_time))


@pytest.mark.parametrize("name, fmt, options", [
    ("gemm", "openscop", {"tile": 8}), ("lu", "jscop", {}), ("seidel-2d", "jscop", {}), ("atax", "openscop", {})])
def test_imported_schedules_compile_and_match_the_interpreter(name, fmt, options):
    entry = po.suite.get(name)
    sched = po.schedule(entry.kernel.scop, "pluto", **options)
    exported = po.to_jscop(sched) if fmt == "jscop" else po.to_openscop(sched)
    imported = (po.schedule_from_jscop if fmt == "jscop" else po.schedule_from_openscop)(entry.kernel, exported)
    compiled = po.compile(entry.kernel, schedule=imported)
    sizes = entry.sizes("MINI")
    ours, reference = entry.inputs(sizes), entry.inputs(sizes)
    compiled(**ours, num_threads=2)
    po.interpret(entry.kernel, **reference)
    for key, value in ours.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_allclose(value, reference[key], rtol=1e-10, err_msg=f"{name}: {key}")


@po.kernel
def axpy(alpha: f64, x: f64["N"], y: f64["N"]):
    for i in range(N):
        y[i] = y[i] + alpha * x[i]


#: axpy as Clan writes a Scop (no context, "N-1 >= 0" in the domain, the scalar alpha a 0-d
#: array, iterators and parameters among the array names), with a scattering edited to run the
#: loop backwards (legal: no dependence).
CLAN_STYLE_AXPY = """# [File written in the style of Clan 0.8]

<OpenScop>

# =============================================== Global
# Language
C

# Context
CONTEXT
0 3 0 0 0 1

# Parameters are provided
1
<strings>
N
</strings>

# Number of statements
1

# =============================================== Statement 1
# Number of relations describing the statement:
6

# ----------------------------------------------  1.1 Domain
DOMAIN
3 4 1 0 0 1
# e/i|  i |  N |  1
   1    1    0    0    ## i >= 0
   1   -1    1   -1    ## -i+N-1 >= 0
   1    0    1   -1    ## N-1 >= 0

# ----------------------------------------------  1.2 Scattering
SCATTERING
3 7 3 1 0 1
# e/i| c1   c2   c3 |  i |  N |  1
   0   -1    0    0    0    0    0    ## c1 == 0
   0    0   -1    0   -1    0    0    ## c2 == -i
   0    0    0   -1    0    0    0    ## c3 == 0

# ----------------------------------------------  1.3 Access
WRITE
2 6 2 1 0 1
# e/i| Arr  [1]|  i |  N |  1
   0   -1    0    0    0    3    ## Arr == y
   0    0   -1    1    0    0    ## [1] == i

READ
2 6 2 1 0 1
# e/i| Arr  [1]|  i |  N |  1
   0   -1    0    0    0    3    ## Arr == y
   0    0   -1    1    0    0    ## [1] == i

READ
1 5 1 1 0 1
# e/i| Arr|  i |  N |  1
   0   -1    0    0    4    ## Arr == alpha

READ
2 6 2 1 0 1
# e/i| Arr  [1]|  i |  N |  1
   0   -1    0    0    0    5    ## Arr == x
   0    0   -1    1    0    0    ## [1] == i

# ----------------------------------------------  1.4 Statement Extensions
# Number of Statement Extensions
1
<body>
# Number of original iterators
1
# List of original iterators
i
# Statement body expression
y[i] = y[i] + alpha * x[i];
</body>

# =============================================== Extensions
<arrays>
# Number of arrays
5
# Mapping array-identifiers/array-names
1 i
2 N
3 y
4 alpha
5 x
</arrays>

</OpenScop>
"""


def test_a_clan_style_openscop_file_imports_and_compiles():
    sched = po.schedule_from_openscop(axpy, CLAN_STYLE_AXPY)
    assert sched.map.is_equal(isl.UnionMap("[N] -> { S0[i] -> [0, -i, 0] : 0 <= i < N }"))
    assert PARALLEL_MARK in sched.pretty()
    x, y = np.arange(10.0), np.ones(10)
    expected = y + 3.0 * x
    po.compile(axpy, schedule=sched)(3.0, x, y)
    np.testing.assert_array_equal(y, expected)
    writes_x = CLAN_STYLE_AXPY.replace("WRITE\n2 6 2 1 0 1\n# e/i| Arr  [1]|  i |  N |  1\n   0   -1    0    0    0    3",
                                       "WRITE\n2 6 2 1 0 1\n# e/i| Arr  [1]|  i |  N |  1\n   0   -1    0    0    0    5")
    with pytest.raises(ExchangeError, match=r"statement S0: the file's writes .*x\[i\]"):
        po.schedule_from_openscop(axpy, writes_x)
    narrower = CLAN_STYLE_AXPY.replace("CONTEXT\n0 3 0 0 0 1", "CONTEXT\n1 3 0 0 0 1\n 1 1 -5")
    with pytest.raises(ExchangeError, match="the context .* excludes parameter values"):
        po.schedule_from_openscop(axpy, narrower)


def test_shorter_time_vectors_are_padded_with_zeros():
    gemm = po.suite.get("gemm").kernel
    data = po.to_jscop(gemm)
    data["statements"][0]["schedule"] = "[NI, NJ, NK] -> { S0[i, j] -> [i, 0, j] }"
    data["statements"][1]["schedule"] = "[NI, NJ, NK] -> { S1[i, k, j] -> [i, 1, k, j] }"
    sched = po.schedule_from_jscop(gemm, data)
    expected = isl.UnionMap("[NI, NJ, NK] -> { S0[i, j] -> [i, 0, j, 0]; S1[i, k, j] -> [i, 1, k, j] }")
    assert sched.map.is_equal(expected.intersect_domain(gemm.scop.domain))
