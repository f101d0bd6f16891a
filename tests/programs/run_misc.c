/* Process paths under `farmem run`: threads that allocate far memory and end,
 * system(), posix_spawn(), dlopen(), atexit handlers that free far memory, and
 * finally exec() of another program (whose exit code the test checks). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;
static uint64_t *keep;
static int fails;
#define CHECK(c, what)                                                                                                 \
    do {                                                                                                               \
        int ok_ = (c);                                                                                                 \
        printf("%-40s %s\n", what, ok_ ? "ok" : "FAILED");                                                              \
        fflush(stdout);                                                                                                \
        fails += !ok_;                                                                                                 \
    } while (0)

static void *worker(void *arg) {
    size_t n = (4UL << 20) / 8, t = (size_t)arg;
    uint64_t *a = malloc(n * 8);
    for (size_t i = 0; i < n; i++)
        a[i] = i ^ t;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += a[i] != (i ^ t);
    free(a);
    return (void *)bad;
}

static void at_exit_free(void) {
    size_t bad = 0;
    for (size_t i = 0; i < (8UL << 20) / 8; i += 511)
        bad += keep[i] != i * 3;
    free(keep);
    printf("atexit check %s\n", bad ? "FAILED" : "ok");
}

int main(void) {
    keep = malloc(8UL << 20);
    for (size_t i = 0; i < (8UL << 20) / 8; i++)
        keep[i] = i * 3;
    atexit(at_exit_free);

    size_t bad = 0;
    for (int round = 0; round < 3; round++) {
        pthread_t th[4];
        for (size_t t = 0; t < 4; t++)
            pthread_create(&th[t], NULL, worker, (void *)t);
        for (int t = 0; t < 4; t++) {
            void *r;
            pthread_join(th[t], &r);
            bad += (size_t)r;
        }
    }
    CHECK(bad == 0, "threads allocate, check, free, end");
    CHECK(system("exit 3") != -1 && WEXITSTATUS(system("exit 3")) == 3, "system()");
    pid_t pid;
    char *argv[] = {"sh", "-c", "exit 4", NULL};
    int st = -1;
    CHECK(posix_spawn(&pid, "/bin/sh", NULL, NULL, argv, environ) == 0 && waitpid(pid, &st, 0) == pid &&
              WEXITSTATUS(st) == 4,
          "posix_spawn()");
    void *m = dlopen("libm.so.6", RTLD_NOW);
    double (*cosp)(double) = m ? (double (*)(double))dlsym(m, "cos") : NULL;
    CHECK(cosp && cosp(0.0) == 1.0, "dlopen() and dlsym()");
    if (m)
        dlclose(m);
    fflush(stdout);
    if (getenv("RUN_MISC_EXEC")) {
        execl("/bin/sh", "sh", "-c", "exit 5", (char *)NULL);
        return 99;
    }
    return fails ? 1 : 0;
}
