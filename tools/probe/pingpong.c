/* A transaction in miniature: two processes answer each other over pipes
 * twice (50 us of work on one side, 30 us on the other), then rest 200 us.
 * Prints the round trip's p50, p99 and p999 over N transactions (argv[1]). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }
static void work(int us) { double t = now(); while ((now() - t) * 1e6 < us) {} }
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40000, a[2], b[2];
    char c = 0;
    if (n < 1000 || pipe(a) || pipe(b)) return 2;
    pid_t child = fork();
    if (child < 0) return 2;
    if (child == 0) {
        /* Only the parent's end may keep the pipe open, so its exit ends this one. */
        close(a[1]);
        close(b[0]);
        for (;;) { if (read(a[0], &c, 1) <= 0) exit(0); work(50); if (write(b[1], &c, 1) != 1) exit(1); }
    }
    close(a[0]);
    close(b[1]);
    double *d = malloc(n * sizeof *d);
    struct timespec rest = {0, 200000};
    for (int i = 0; i < n; i++) {
        double t = now();
        if (write(a[1], &c, 1) != 1 || read(b[0], &c, 1) != 1) return 1;
        work(30);
        if (write(a[1], &c, 1) != 1 || read(b[0], &c, 1) != 1) return 1;
        d[i] = (now() - t) * 1e6;
        nanosleep(&rest, 0);
    }
    close(a[1]);
    waitpid(child, 0, 0);
    qsort(d, n, sizeof *d, cmp);
    printf("p50 %.0f us  p99 %.0f  p999 %.0f\n", d[n / 2], d[n * 99 / 100], d[n * 999 / 1000]);
    return 0;
}
