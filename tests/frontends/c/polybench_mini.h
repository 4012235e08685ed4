/* A small stand-in for the PolyBench/C 4.2 conventions, written for polyopt's tests:
   macro-sized array declarations, DATA_TYPE and SCALAR_VAL. */
#ifndef POLYBENCH_MINI_H
#define POLYBENCH_MINI_H

#ifdef POLYBENCH_USE_C99_PROTO
# define POLYBENCH_C99_SELECT(x, y) y
#else
# define POLYBENCH_C99_SELECT(x, y) x
#endif

#define POLYBENCH_1D(var, dim1, ddim1) var[POLYBENCH_C99_SELECT(dim1, ddim1)]
#define POLYBENCH_2D(var, dim1, dim2, ddim1, ddim2) \
  var[POLYBENCH_C99_SELECT(dim1, ddim1)][POLYBENCH_C99_SELECT(dim2, ddim2)]
#define POLYBENCH_3D(var, dim1, dim2, dim3, ddim1, ddim2, ddim3) \
  var[POLYBENCH_C99_SELECT(dim1, ddim1)][POLYBENCH_C99_SELECT(dim2, ddim2)][POLYBENCH_C99_SELECT(dim3, ddim3)]

#ifdef DATA_TYPE_IS_FLOAT
# define DATA_TYPE float
# define SCALAR_VAL(x) x##f
# define SQRT_FUN(x) sqrtf(x)
#else
# define DATA_TYPE double
# define SCALAR_VAL(x) x
# define SQRT_FUN(x) sqrt(x)
#endif

#endif
