/* Function-local variables around '#pragma scop' regions, as real C code writes them (pet and
   Pluto accept all of these); written for polyopt's tests. */
#include <math.h>
#include "polybench_mini.h"

#ifndef N
# define N 24
#endif

/* A scalar initialized before the region and only read in it: a read-only parameter. */
void clamp_small(int n, DATA_TYPE POLYBENCH_1D(x, N, n), DATA_TYPE POLYBENCH_1D(y, N, n))
{
  int i;
  DATA_TYPE eps = SCALAR_VAL(0.25);

#pragma scop
  for (i = 0; i < n; i++)
    y[i] = x[i] <= eps ? SCALAR_VAL(1.0) : x[i] - eps;
#pragma endscop
}

/* Scalars computed before the region from parameters: a floating-point factor and an integer
   loop bound (a size parameter of the region). */
void scaled_half(int n, DATA_TYPE alpha, DATA_TYPE POLYBENCH_2D(A, N, N, n, n))
{
  int i, j;
  int half = n / 2 + 1;
  DATA_TYPE scale = alpha * alpha + SCALAR_VAL(0.5);

#pragma scop
  for (i = 1; i < half; i++)
    for (j = 0; j < n; j++)
      A[i][j] = scale * A[i - 1][j] + A[i][j];
#pragma endscop
}

/* An array local to the function: scratch storage of the region (as in durbin). */
void reverse_prefix(int n, DATA_TYPE POLYBENCH_1D(r, N, n), DATA_TYPE POLYBENCH_1D(y, N, n))
{
  DATA_TYPE z[N];
  int i, k;

#pragma scop
  for (k = 1; k < n; k++) {
    for (i = 0; i < k; i++)
      z[i] = y[i] + r[k] * y[k - i - 1];
    for (i = 0; i < k; i++)
      y[i] = z[i];
  }
#pragma endscop
}

/* Scalars assigned in the region (chained assignments, as deriche's coefficients; c is an int,
   so a3 gets the truncated value), carried along a loop, and one read after the region. */
void smooth_rows(int n, DATA_TYPE alpha, DATA_TYPE POLYBENCH_2D(A, N, N, n, n),
                 DATA_TYPE POLYBENCH_2D(B, N, N, n, n))
{
  int i, j, c;
  DATA_TYPE k, a1, a2, a3, prev;

#pragma scop
  k = SCALAR_VAL(1.0) - exp(-alpha);
  a1 = a2 = k;
  a3 = c = k * SCALAR_VAL(7.0);
  for (i = 0; i < n; i++) {
    prev = SCALAR_VAL(0.0);
    for (j = 0; j < n; j++) {
      B[i][j] = a1 * A[i][j] + a2 * prev + a3 + c;
      prev = A[i][j];
    }
  }
#pragma endscop
  B[0][0] = prev;
}
