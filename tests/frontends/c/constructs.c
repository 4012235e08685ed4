/* One kernel per group of supported constructs; each is checked against gcc -O0 by the tests. */
#include <math.h>

#define floord(n, d) (((n) < 0) ? -((-(n) + (d) - 1) / (d)) : (n) / (d))
#define ceild(n, d) (((n) < 0) ? -((-(n)) / (d)) : ((n) + (d) - 1) / (d))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define MIN(a, b) ((a) < (b) ? (a) : (b))

static int min(int a, int b) { return a < b ? a : b; }
static int max(int a, int b) { return a > b ? a : b; }

/* every loop form: <, <=, >, >=, ++i, i++, i--, --i, += c, -= c, a declared iterator */
void loop_forms(int n, double A[n], double B[n][n])
{
  int i, j;
#pragma scop
  for (i = 0; i <= n - 1; ++i)
    A[i] = 1.0 * i;
  for (i = n - 1; i > 0; i--)
    A[i] = A[i] + A[i - 1];
  for (i = n - 1; i >= 0; --i)
    for (int k = 0; k < n; k += 3)
      B[i][k] = A[i] - k;
  for (i = n - 2; i >= 1; i -= 2)
    for (j = i; j < n; j = j + 1)
      B[i][j] = B[i][j] * 2.0 + B[i + 1][j];
  for (i = 0; n > i; i++)
    A[i] = A[i] / 3.0;
#pragma endscop
}

/* bounds: min/max ternaries, floord/ceild macros and helper functions, division by constants */
void bounds(int n, int m, double A[n][m])
{
  int i, j;
#pragma scop
  for (i = 0; i < n; i++)
    for (j = MAX(0, i - 2); j < MIN(m, i + 3); j++)
      A[i][j] += 1.0;
  for (i = 0; i <= floord(n - 1, 2); i++)
    for (j = ceild(i, 3); j < m; j++)
      A[2 * i][j] -= 0.5;
  for (i = 0; i < (n + 1) / 2; i++)
    for (j = max(0, i - 1); j <= min(m - 1, i + 1); j++)
      A[i][j] *= 3.0;
  for (i = 0; i < n && i < m; i++)
    A[i][i] = A[i][(i + 1) / 2] + A[i % 2][m - 1];
#pragma endscop
}

/* affine if / else with &&, ||, !, ==, != and % */
void conditions(int n, double A[n][n], double x[n])
{
  int i, j;
#pragma scop
  for (i = 0; i < n; i++)
    for (j = 0; j < n; j++) {
      if (i == j)
        A[i][j] = 10.0;
      else if (i < j && !(j - i > 3))
        A[i][j] = -1.0;
      else
        A[i][j] = 0.5 * A[i][j];
      if (i % 2 == 0 || j == n - 1)
        x[i] += A[i][j];
      if (i != 0) {
        x[i] -= x[i - 1] * 0.25;
      }
    }
#pragma endscop
}

/* scalars (inside / outside the scop), compound assignments, ternary, casts, math calls */
void scalars(int n, double alpha, float F[n], double A[n], int I[n], double B[n][n])
{
  int i, j;
  double s;
#pragma scop
  for (i = 0; i < n; i++) {
    double t = A[i] * alpha;
    s = 0.0;
    for (j = 0; j <= i; j++)
      s += B[i][j] * t;
    s -= 1.0;
    s *= 0.5;
    s /= 1.5;
    A[i] = s > 0 ? sqrt(s) + exp(-s) : pow(-s, 1.5) + fabs(sin(s)) + log(1.0 + cos(s) * cos(s));
    F[i] = sqrtf(F[i] + 1.0f) * 2.5f + (float) tanh(s) + floorf(F[i]) + fabsf(-F[i]) + expf(0.5f * F[i]);
    F[i] += (float) (1.0 / 3.0) + F[i] * 0.1;
    I[i] = (int) (A[i] * 10.0) / 3 + (I[i] - 7) / 2 + (I[i] - 9) % 4 + (int) floor(2.5 * i);
    I[i] %= 5;
    I[i]++;
    B[i][i] = (double) I[i] / 4 + (i > 2 && A[i] < 1.0) + (double) (i / 3);
  }
#pragma endscop
}

/* three dimensions, fixed-size and variable-length parameters, a file-scope array */
double G[8][6];

void three_d(int nr, int nq, int np, double A[nr][nq][np], double C4[8][8], double sum[np])
{
  int r, q, p, s;
#pragma scop
  for (r = 0; r < nr; r++)
    for (q = 0; q < nq; q++) {
      for (p = 0; p < np; p++) {
        sum[p] = 0.0;
        for (s = 0; s < np && s < 8; s++)
          sum[p] += A[r][q][s] * C4[s][p % 8];
      }
      for (p = 0; p < np; p++)
        A[r][q][p] = sum[p] + G[r % 8][q % 6];
    }
#pragma endscop
}

/* two regions in one function, the first with an explicit time parameter */
void two_regions(int tsteps, int n, double A[n], double B[n])
{
  int t, i;
#pragma scop
  for (t = 0; t < tsteps; t++)
    for (i = 1; i < n - 1; i++)
      A[i] = (A[i - 1] + A[i] + A[i + 1]) / 3.0;
#pragma endscop
  for (i = 0; i < n; i++)
    B[i] = 0.0;
#pragma scop
  for (i = 0; i < n; i++)
    B[i] = B[i] + A[n - 1 - i];
#pragma endscop
}
