"""polyopt shares its process with other users of LLVM and isl: it leaves their global state as
it found it, and two Python threads may compile kernels at once."""
from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np

import polyopt as po

# A plain in-order floating-point sum, optimized the way another llvmlite user (numba, say)
# would optimize it. LLVM vectorizes it only under -force-ordered-reductions, which polyopt
# sets for its own modules alone.
_OTHER_USER = r"""
import llvmlite.binding as llvm
import polyopt as po
import numpy as np

total = po.kernel_from_source('''def total(A: f64["N"], s: f64["1"]):
    for i in range(N):
        s[0] += A[i]
''')
total(np.ones(1000), np.zeros(1))  # polyopt compiles (and sets its LLVM option) first

IR = '''
define double @sum(double* %a, i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%next, %loop]
  %acc = phi double [0.0, %entry], [%add, %loop]
  %p = getelementptr double, double* %a, i64 %i
  %x = load double, double* %p
  %add = fadd double %acc, %x
  %next = add i64 %i, 1
  %done = icmp eq i64 %next, %n
  br i1 %done, label %exit, label %loop
exit:
  ret double %add
}
'''
target = llvm.Target.from_default_triple()
tm = target.create_target_machine(cpu=llvm.get_host_cpu_name(),
                                  features=llvm.get_host_cpu_features().flatten(), opt=3)
module = llvm.parse_assembly(IR)
options = llvm.create_pipeline_tuning_options(speed_level=3)
options.loop_vectorization = True
llvm.create_pass_builder(tm, options).getModulePassManager().run(
    module, llvm.create_pass_builder(tm, options))
print("vectorized" if "vector.reduce.fadd" in str(module) or "<2 x double>" in str(module)
      or "<4 x double>" in str(module) or "<8 x double>" in str(module) else "scalar")
"""


def test_llvm_options_are_restored_for_other_llvmlite_users():
    child = subprocess.run([sys.executable, "-c", _OTHER_USER], capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stderr[-2000:]
    assert child.stdout.strip().splitlines()[-1] == "scalar"


def test_two_threads_compile_different_kernels_at_once():
    sources = {
        "feautrier": '''def k(A: f64["N", "N"]):
    for i in range(1, N):
        for j in range(1, N):
            A[i, j] = A[i - 1, j] + A[i, j - 1]
''',
        "isl": '''def k(A: f64["N"], B: f64["N"]):
    for i in range(N):
        B[i] = 2.0 * A[i]
    for i in range(1, N):
        A[i] = B[i - 1] + A[i]
''',
        "pluto": '''def k(C: f64["N", "N"], A: f64["N", "N"], B: f64["N", "N"]):
    for i in range(N):
        for j in range(N):
            for k in range(N):
                C[i, j] += A[i, k] * B[k, j]
''',
    }
    errors: list[BaseException] = []
    results: dict[str, bool] = {}

    def work(algorithm: str, source: str) -> None:
        try:
            for _ in range(2):
                kernel = po.kernel_from_source(source)
                compiled = po.compile(kernel, algorithm=algorithm)
                arrays = [np.random.default_rng(1).random((12,) * len(a.shape))
                          for a in kernel.scop.arrays.values()]
                expected = [a.copy() for a in arrays]
                po.interpret(kernel, *expected)
                compiled(*arrays)
                results[algorithm] = all(np.allclose(a, e) for a, e in zip(arrays, expected))
        except BaseException as exc:  # reported below, with the thread's algorithm
            errors.append(exc)

    threads = [threading.Thread(target=work, args=item) for item in sources.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert not errors, errors
    assert results == dict.fromkeys(sources, True)
