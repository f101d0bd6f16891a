/* fork() after far allocations: a child that does not touch far memory runs
 * normally; a child that does stops with a farmem message (never reads zero
 * or stale data). The parent's far data stays intact throughout. */
#include <farmem.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void) {
    size_t n = 16UL << 20;
    uint64_t *a = fm_alloc(n);
    if (!a)
        return 2;
    for (size_t i = 0; i < n / 8; i++)
        a[i] = i ^ 0x5555;
    fflush(stdout);
    pid_t p = fork();
    if (p == 0)
        _exit(7); /* touches nothing far */
    int st;
    waitpid(p, &st, 0);
    printf("quiet child: exit %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    fflush(stdout);
    p = fork();
    if (p == 0) {
        volatile uint64_t v = a[12345];
        printf("child read %llu\n", (unsigned long long)v);
        _exit(0);
    }
    waitpid(p, &st, 0);
    printf("touching child: %s\n", WIFSIGNALED(st) ? "stopped by signal" : "exited");
    uint64_t bad = 0;
    for (size_t i = 0; i < n / 8; i++)
        bad += a[i] != (i ^ 0x5555);
    printf("parent bad=%llu\n", (unsigned long long)bad);
    return bad == 0 && WIFSIGNALED(st) ? 0 : 1;
}
