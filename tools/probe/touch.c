/* A best-effort job's start in miniature: map MiB (argv[1]) of anonymous
 * memory, write every page once, exit. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
int main(int argc, char **argv) {
    size_t size = (size_t)(argc > 1 ? atoi(argv[1]) : 200) << 20;
    char *p = mmap(0, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 1;
    memset(p, 1, size);
    return 0;
}
