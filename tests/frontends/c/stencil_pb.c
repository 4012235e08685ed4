/* A PolyBench-style time-iterated stencil with a scalar temporary, SCALAR_VAL literals and sqrt. */
#include <math.h>
#include "polybench_mini.h"

#define TSTEPS 6
#define N 24
#define _PB_TSTEPS TSTEPS
#define _PB_N N

void kernel_heat(int tsteps, int n, DATA_TYPE POLYBENCH_2D(A, N, N, n, n),
                 DATA_TYPE POLYBENCH_2D(B, N, N, n, n))
{
  int t, i, j;
  DATA_TYPE acc;

#pragma scop
  for (t = 1; t <= _PB_TSTEPS; t++) {
    for (i = 1; i < _PB_N - 1; i++)
      for (j = 1; j < _PB_N - 1; j++) {
        acc = SCALAR_VAL(0.25) * (A[i-1][j] + A[i+1][j] + A[i][j-1] + A[i][j+1]);
        B[i][j] = SQRT_FUN(acc * acc + SCALAR_VAL(1.0)) - SCALAR_VAL(1.0);
      }
    for (i = 1; i < _PB_N - 1; i++)
      for (j = 1; j < _PB_N - 1; j++)
        A[i][j] = B[i][j];
  }
#pragma endscop
}
