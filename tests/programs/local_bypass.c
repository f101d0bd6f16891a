/* Memory that farmem run cannot page, or can: `fixed MIB` maps MIB at a
 * fixed address of its own (MAP_FIXED_NOREPLACE, as a private allocator or
 * a managed runtime may), `small MIB` allocates it in 64 KiB pieces (below
 * the threshold), `far MIB` in one malloc. Each touches every page, holds
 * it for HOLD_MS (default 1500, so a watcher sampling each second sees it)
 * and prints a checksum. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: local_bypass fixed|small|far MIB\n");
        return 2;
    }
    size_t bytes = strtoul(argv[2], NULL, 10) << 20, sum = 0;
    const char *hold = getenv("HOLD_MS");
    long ms = hold ? atol(hold) : 1500;
    if (strcmp(argv[1], "fixed") == 0) {
        char *p = mmap((void *)0x300000000000UL, bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (p == MAP_FAILED) {
            perror("mmap");
            return 1;
        }
        for (size_t i = 0; i < bytes; i += 4096)
            p[i] = (char)(i >> 12), sum += (unsigned char)p[i];
    } else if (strcmp(argv[1], "small") == 0) {
        for (size_t done = 0; done < bytes; done += 65536) {
            char *p = malloc(65536);
            for (size_t i = 0; i < 65536; i += 4096)
                p[i] = (char)(i >> 12), sum += (unsigned char)p[i];
        }
    } else {
        char *p = malloc(bytes);
        for (size_t i = 0; i < bytes; i += 4096)
            p[i] = (char)(i >> 12), sum += (unsigned char)p[i];
    }
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
    printf("sum %zu\n", sum);
    return 0;
}
