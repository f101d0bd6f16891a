#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
#define P 4096UL
#define N 16384UL
int main(void){
  int fd=memfd_create("x",0); ftruncate(fd,N*P);
  char *m=mmap(0,N*P,PROT_READ|PROT_WRITE,MAP_SHARED,fd,0); memset(m,1,N*P);
  char *buf=aligned_alloc(P,64*P); memset(buf,2,64*P);
  char *big=malloc(512UL<<20); memset(big,3,512UL<<20); /* cold source */
  int R=200000; unsigned s=1; double t;
  t=now(); for(int i=0;i<R;i++) syscall(SYS_getppid); printf("getppid        %6.0f ns\n",(now()-t)/R);
  t=now(); for(int i=0;i<R;i++){s=s*1103515245u+12345u; pwrite(fd,buf,P,((s>>8)%N)*P);} printf("pwrite 4K hot  %6.0f ns\n",(now()-t)/R);
  t=now(); for(int i=0;i<R;i++){s=s*1103515245u+12345u; pwrite(fd,big+((s>>4)%131072)*P,P,((s>>8)%N)*P);} printf("pwrite 4K cold %6.0f ns\n",(now()-t)/R);
  t=now(); for(int i=0;i<R;i++){s=s*1103515245u+12345u; pread(fd,buf,P,((s>>8)%N)*P);} printf("pread 4K       %6.0f ns\n",(now()-t)/R);
  t=now(); for(int i=0;i<R/16;i++){s=s*1103515245u+12345u; pwrite(fd,buf,16*P,((s>>8)%(N-16))*P);} printf("pwrite 64K /pg %6.0f ns\n",(now()-t)/R);
  t=now(); for(int i=0;i<R;i++){s=s*1103515245u+12345u; memcpy(m+((s>>8)%N)*P,big+((s>>4)%131072)*P,P);} printf("memcpy mapped cold %6.0f ns\n",(now()-t)/R);
  return 0;}
