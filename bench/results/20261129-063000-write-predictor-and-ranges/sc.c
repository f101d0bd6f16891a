#define _GNU_SOURCE
#include <unistd.h>
#include <sys/syscall.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(){int N=1000000; double t=now(); for(int i=0;i<N;i++) syscall(SYS_getppid); printf("syscall %.0f ns\n",(now()-t)/N*1e9);
char*a=aligned_alloc(4096,1<<26),*b=aligned_alloc(4096,1<<26); memset(a,1,1<<26); memset(b,2,1<<26);
t=now(); for(int r=0;r<20;r++) for(size_t i=0;i<(1<<26);i+=4096) memcpy(b+i,a+i,4096); printf("memcpy 4K cold-ish %.0f ns\n",(now()-t)/(20*16384)*1e9);
t=now(); for(int r=0;r<20*16384;r++) memcpy(b,a,4096); printf("memcpy 4K hot %.0f ns\n",(now()-t)/(20*16384)*1e9);
}
