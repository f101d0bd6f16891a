#define _GNU_SOURCE
#include <sys/mman.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  size_t sz=64<<20, np=sz/4096; int fd=memfd_create("x",0); ftruncate(fd,sz);
  char *buf=aligned_alloc(4096,1<<20); memset(buf,1,1<<20);
  for(size_t i=0;i<np;i++) pwrite(fd,buf,4096,i*4096);
  int N=200000; unsigned s=1;
  double t=now();
  for(int i=0;i<N;i++){ s=s*1103515245+12345; size_t p=(s>>8)%np; pwrite(fd,buf+(i%256)*4096,4096,p*4096);}
  double a=now()-t; t=now();
  for(int i=0;i<N;i++){ s=s*1103515245+12345; size_t p=(s>>8)%np; pread(fd,buf+(i%256)*4096,4096,p*4096);}
  double b=now()-t;
  // sequential 
  t=now(); for(int i=0;i<N;i++){ pwrite(fd,buf+(i%256)*4096,4096,(i%np)*4096);} double c=now()-t;
  printf("random pwrite %.0f ns, random pread %.0f ns, seq pwrite %.0f ns\n",a/N*1e9,b/N*1e9,c/N*1e9);
}
