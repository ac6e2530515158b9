/*
 * touch: random-touch workers for overbook's thrashing calibration.
 *
 *   touch MODE CGROUP WORKERS TOTAL_BYTES WARM_SECS MEASURE_SECS [FILE]
 *
 * MODE anon: each worker owns TOTAL_BYTES/WORKERS of private anonymous memory,
 *            faults it all in, then writes one byte of a uniformly random page
 *            in a loop (written pages are dirty: every eviction goes to swap).
 * MODE file: each worker maps its own TOTAL_BYTES/WORKERS slice of FILE
 *            (read-only, shared), reads it all in, then reads one byte of a
 *            uniformly random page in a loop (evictions drop clean page cache,
 *            misses are reads from the disk).
 *
 * Workers move themselves into CGROUP (a cgroup v1 memory directory, or "-"
 * for none) before touching anything, so that all their memory is charged
 * there; this process stays outside it, so its own timing is not squeezed.
 * Once every worker has filled its set, it waits WARM_SECS (reclaim settles
 * into its steady state), then counts touches and reads CGROUP's memory.stat
 * over MEASURE_SECS, prints one line of key=value pairs, and kills the workers.
 * Workers also die with this process (PR_SET_PDEATHSIG), so a `timeout`
 * around it leaves nothing behind.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096UL
#define MAX_WORKERS 64
#define FILL_TIMEOUT_SECS 120.0

/* TOUCH_WORK in the environment: extra computation per touch (default 0). */
static unsigned work_steps;

/* One cache line per worker, so that publishing counts does not bounce lines. */
struct slot {
    uint64_t touches;
    uint64_t ready;
    char pad[48];
};

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *what) {
    fprintf(stderr, "touch: %s: %s\n", what, strerror(errno));
    exit(2);
}

struct stat_snap {
    uint64_t pgmajfault, refault_anon, refault_file, swap, rss, cache, oom_kill, usage;
};

/* memory.stat of the node cgroup; the total_ keys include descendants. */
static struct stat_snap read_stat(const char *cg) {
    struct stat_snap s = {0};
    if (strcmp(cg, "-") == 0)
        return s;
    char path[4096];
    snprintf(path, sizeof path, "%s/memory.stat", cg);
    FILE *f = fopen(path, "r");
    if (!f)
        die(path);
    char key[128];
    uint64_t v;
    while (fscanf(f, "%127s %" SCNu64, key, &v) == 2) {
        if (!strcmp(key, "total_pgmajfault")) s.pgmajfault = v;
        else if (!strcmp(key, "total_workingset_refault_anon")) s.refault_anon = v;
        else if (!strcmp(key, "total_workingset_refault_file")) s.refault_file = v;
        else if (!strcmp(key, "total_swap")) s.swap = v;
        else if (!strcmp(key, "total_rss")) s.rss = v;
        else if (!strcmp(key, "total_cache")) s.cache = v;
    }
    fclose(f);
    /* memory.oom_control counts the memcg OOM kills: a run with one is void. */
    snprintf(path, sizeof path, "%s/memory.oom_control", cg);
    f = fopen(path, "r");
    if (!f)
        die(path);
    while (fscanf(f, "%127s %" SCNu64, key, &v) == 2)
        if (!strcmp(key, "oom_kill")) s.oom_kill = v;
    fclose(f);
    /* Everything charged (page tables and binaries too): what the limit sees. */
    snprintf(path, sizeof path, "%s/memory.usage_in_bytes", cg);
    f = fopen(path, "r");
    if (!f || fscanf(f, "%" SCNu64, &s.usage) != 1)
        die(path);
    fclose(f);
    return s;
}

static uint64_t sum_touches(struct slot *slots, int n) {
    uint64_t t = 0;
    for (int i = 0; i < n; i++)
        t += __atomic_load_n(&slots[i].touches, __ATOMIC_RELAXED);
    return t;
}

static void worker(int id, const char *mode, const char *cg, size_t bytes,
                   int fd, struct slot *slot) {
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
        die("prctl");
    if (getppid() == 1)
        _exit(3); /* parent already gone */
    if (strcmp(cg, "-") != 0) {
        char path[4096];
        snprintf(path, sizeof path, "%s/cgroup.procs", cg);
        FILE *f = fopen(path, "w");
        if (!f || fprintf(f, "%d\n", getpid()) < 0 || fclose(f) != 0)
            die(path);
    }
    size_t pages = bytes / PAGE;
    int anon = strcmp(mode, "anon") == 0;
    volatile unsigned char *p;
    if (anon) {
        p = mmap(NULL, pages * PAGE, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            die("mmap anon");
        /* 4 KiB pages only: a huge page would make one fault move 2 MiB. */
        madvise((void *)p, pages * PAGE, MADV_NOHUGEPAGE);
        /* Fill with incompressible, non-zero data: the kernel skips writing
         * zero-filled pages to swap, which would flatter the device. */
        uint64_t f = 0x2545F4914F6CDD1DULL ^ (uint64_t)id;
        for (size_t i = 0; i < pages * PAGE / 8; i++) {
            f ^= f << 13;
            f ^= f >> 7;
            f ^= f << 17;
            ((volatile uint64_t *)p)[i] = f;
        }
    } else {
        p = mmap(NULL, pages * PAGE, PROT_READ, MAP_SHARED, fd,
                 (off_t)(id * pages * PAGE));
        if (p == MAP_FAILED)
            die("mmap file");
        /* Random access: no readahead, each miss reads only its own page. */
        madvise((void *)p, pages * PAGE, MADV_RANDOM);
        unsigned sink = 0;
        for (size_t i = 0; i < pages; i++)
            sink += p[i * PAGE];
        (void)sink;
    }
    __atomic_store_n(&slot->ready, 1, __ATOMIC_RELEASE);

    uint64_t x = 0x9E3779B97F4A7C15ULL ^ ((uint64_t)getpid() << 17) ^ (uint64_t)id;
    uint64_t count = 0;
    unsigned sink = 0;
    for (;;) {
        for (int k = 0; k < 16; k++) {
            /* work_steps extra generator steps per touch: computation between
             * memory accesses, for tasks less memory-bound than a pure loop. */
            for (unsigned w = 0; w <= work_steps; w++) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
            }
            size_t page = (size_t)((x >> 12) % pages);
            size_t off = (size_t)(x & 0xFC0); /* any cache line of the page */
            if (anon)
                p[page * PAGE + off] += 1;
            else
                sink += p[page * PAGE + off];
        }
        count += 16;
        __atomic_store_n(&slot->touches, count + (sink & 0), __ATOMIC_RELAXED);
    }
}

int main(int argc, char **argv) {
    if (argc < 7 || (strcmp(argv[1], "anon") && strcmp(argv[1], "file")) ||
        (!strcmp(argv[1], "file") && argc < 8)) {
        fprintf(stderr, "usage: touch anon|file CGROUP|- WORKERS TOTAL_BYTES "
                        "WARM_SECS MEASURE_SECS [FILE]\n");
        return 1;
    }
    const char *mode = argv[1], *cg = argv[2];
    int n = atoi(argv[3]);
    size_t total = strtoull(argv[4], NULL, 10);
    double warm = atof(argv[5]), measure = atof(argv[6]);
    if (n < 1 || n > MAX_WORKERS || total / n < PAGE || measure <= 0) {
        fprintf(stderr, "touch: bad arguments\n");
        return 1;
    }
    size_t each = total / n / PAGE * PAGE;
    const char *work = getenv("TOUCH_WORK");
    work_steps = work ? (unsigned)strtoul(work, NULL, 10) : 0;

    int fd = -1;
    if (!strcmp(mode, "file")) {
        fd = open(argv[7], O_RDONLY);
        if (fd < 0)
            die(argv[7]);
        /* Drop the file's cached pages, so that the workers read them in and
         * they are charged to the node cgroup, not to whoever cached them. */
        if (posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) != 0)
            die("fadvise");
    }

    struct slot *slots = mmap(NULL, sizeof(struct slot) * MAX_WORKERS,
                              PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (slots == MAP_FAILED)
        die("mmap slots");
    memset(slots, 0, sizeof(struct slot) * MAX_WORKERS);

    pid_t pids[MAX_WORKERS];
    double t0 = now();
    for (int i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid < 0)
            die("fork");
        if (pid == 0)
            worker(i, mode, cg, each, fd, &slots[i]);
        pids[i] = pid;
    }

    int status = 0;
    for (;;) {
        int ready = 0;
        for (int i = 0; i < n; i++)
            ready += __atomic_load_n(&slots[i].ready, __ATOMIC_ACQUIRE) != 0;
        if (ready == n)
            break;
        /* A worker that died (cgroup write failed, OOM kill) never gets ready. */
        if (waitpid(-1, NULL, WNOHANG) > 0 || now() - t0 > FILL_TIMEOUT_SECS) {
            fprintf(stderr, "touch: a worker died or did not fill in time\n");
            status = 2;
            goto out;
        }
        usleep(10000);
    }
    double fill = now() - t0;
    usleep((useconds_t)(warm * 1e6));

    struct stat_snap s0 = read_stat(cg);
    uint64_t w0[MAX_WORKERS];
    for (int i = 0; i < n; i++)
        w0[i] = __atomic_load_n(&slots[i].touches, __ATOMIC_RELAXED);
    uint64_t c0 = sum_touches(slots, n);
    double m0 = now();
    usleep((useconds_t)(measure * 1e6));
    uint64_t c1 = sum_touches(slots, n);
    double m1 = now();
    struct stat_snap s1 = read_stat(cg);
    double secs = m1 - m0;
    /* Reclaim is not fair: one worker may keep its pages while another
     * thrashes. The slowest and fastest worker's share show how unequal. */
    double wmin = 1e300, wmax = 0;
    for (int i = 0; i < n; i++) {
        double r = (__atomic_load_n(&slots[i].touches, __ATOMIC_RELAXED) - w0[i]) / secs;
        wmin = r < wmin ? r : wmin;
        wmax = r > wmax ? r : wmax;
    }
    /* Every worker must still be alive: an OOM-killed worker would make the
     * node look faster (fewer pages competing) and the run meaningless. */
    int alive = 0;
    for (int i = 0; i < n; i++)
        alive += waitpid(pids[i], NULL, WNOHANG) == 0;

    printf("touches_per_sec=%.1f pgmajfault_per_sec=%.1f refault_anon_per_sec=%.1f "
           "refault_file_per_sec=%.1f worker_min_per_sec=%.1f worker_max_per_sec=%.1f "
           "secs=%.3f fill_secs=%.3f rss=%" PRIu64 " cache=%" PRIu64 " swap=%" PRIu64
           " usage=%" PRIu64 " oom_kills=%" PRIu64 " alive=%d\n",
           (c1 - c0) / secs, (s1.pgmajfault - s0.pgmajfault) / secs,
           (s1.refault_anon - s0.refault_anon) / secs,
           (s1.refault_file - s0.refault_file) / secs, wmin, wmax, secs, fill, s1.rss,
           s1.cache, s1.swap, s1.usage, s1.oom_kill, alive);
    fflush(stdout);
    if (alive != n || s1.oom_kill != 0)
        status = 4;
out:
    for (int i = 0; i < n; i++)
        kill(pids[i], SIGKILL);
    for (int i = 0; i < n; i++)
        waitpid(pids[i], NULL, 0);
    return status;
}
