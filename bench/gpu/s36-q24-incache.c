/* Session 36: the integer form of the replica (bench/gpu/s36-q24-replica.patch applied) against the
 * float one on one expert matrix kept in cache, one thread:
 *   cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc bench/gpu/s36-q24-incache.c build/libedge0.a \
 *      -lm -lpthread -ldl -lcjson -lpcre2-8 -lutf8proc -luring -o /tmp/mb && /tmp/mb */
#include "gpu/replica.h"
#include "quant/ggml.h"
#include "quant/mat.h"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now_s(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+1e-9*t.tv_nsec;}
int main(void){
  enum{R=512,C=2048};
  uint32_t types[3]={GGML_Q4_K,GGML_Q6_K,GGML_Q8_0}; const char*nm[3]={"Q4_K","Q6_K","Q8_0"};
  float *x=malloc(C*4),*y=malloc(R*4); for(int i=0;i<C;i++)x[i]=(float)(i%17)/17.f-.5f;
  rq24 q; char err[256]; rq24_new(&q,C,err); rq24_prep(&q,x);
  for(int t=0;t<3;t++){
    size_t wb=(size_t)ggml_row_bytes(types[t],C)*R; uint8_t*w=malloc(wb);
    for(size_t i=0;i<wb;i++)w[i]=(uint8_t)(i*2654435761u>>13);
    e0_mat m={.rows=R,.cols=C,.layout=E0_L_ROWS,.stype=E0_S_BF16,.type=E0_W_GGML,.gtype=types[t],.w=w};
    rmat r; rmat_of(&m,&r,err);
    for(int f=0;f<2;f++){ double t0=now_s(); int n=0; while(now_s()-t0<0.5){ if(f) replica_q24_mv(&r,&q,0,R,y); else replica_mv(&r,x,0,R,y); n++; }
      printf("%s %s in-cache %.2f GB/s\n",nm[t],f?"int  ":"float",n*(double)wb/(now_s()-t0)/1e9);}
    free(w);
  }
  return 0;
}
