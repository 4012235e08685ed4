/* gemm in the PolyBench/C 4.2 style: sizes are macros, bounds are _PB_ macros. */
#include <math.h>
#include "polybench_mini.h"

#ifndef NI
# define NI 20
#endif
#ifndef NJ
# define NJ 25
#endif
#ifndef NK
# define NK 30
#endif

#ifdef POLYBENCH_USE_SCALAR_LB
# define _PB_NI ni
# define _PB_NJ nj
# define _PB_NK nk
#else
# define _PB_NI NI
# define _PB_NJ NJ
# define _PB_NK NK
#endif

void kernel_gemm(int ni, int nj, int nk, DATA_TYPE alpha, DATA_TYPE beta,
                 DATA_TYPE POLYBENCH_2D(C, NI, NJ, ni, nj),
                 DATA_TYPE POLYBENCH_2D(A, NI, NK, ni, nk),
                 DATA_TYPE POLYBENCH_2D(B, NK, NJ, nk, nj))
{
  int i, j, k;

#pragma scop
  for (i = 0; i < _PB_NI; i++) {
    for (j = 0; j < _PB_NJ; j++)
      C[i][j] *= beta;
    for (k = 0; k < _PB_NK; k++) {
      for (j = 0; j < _PB_NJ; j++)
        C[i][j] += alpha * A[i][k] * B[k][j];
    }
  }
#pragma endscop
}
