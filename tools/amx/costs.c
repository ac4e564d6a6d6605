// What AMX tile instructions cost beside 512-bit vector work on this machine, one thread:
// the measurement behind x86::amx's loop (session 26, Intel Xeon family 6 model 207 under KVM).
// Each line times 2,000,000 iterations of one sub-block's work as the AMX kernel does it —
// "epi only": the float scaling of 16 tokens' stored sums (cvt, mul, fma, fnmadd per token);
// "amx only": two tile loads (16 x 32 activation bytes, 8 x 64 weight bytes), tilezero,
// tdpbusd, a 1 KiB tile store; then both in sequence, interleaved by quarters, and pairs.
// If the tile instructions overlapped the vector work, "amx then epi" would cost about the
// larger of the two; on that Xeon it cost their sum or more.
//
//   gcc -O2 -mamx-tile -mamx-int8 -mavx512f -mavx512bw -mfma tools/amx/costs.c -o /tmp/amx-costs
//   /tmp/amx-costs      # needs a CPU with amx_int8 (lscpu); Linux grants the tile state
#include <immintrin.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
typedef struct { uint8_t palette, start; uint8_t r[14]; uint16_t colsb[16]; uint8_t rows[16]; } __attribute__((aligned(64))) cfg_t;
static double now(){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec+t.tv_nsec*1e-9;}
static uint8_t A[64*1024] __attribute__((aligned(64)));
static uint8_t B[64*1024] __attribute__((aligned(64)));
static uint8_t C[8*1024] __attribute__((aligned(64)));
static float D[64] __attribute__((aligned(64)));
#define EPI(t0,t1) for(int t=t0;t<t1;t++){ __m512i v=_mm512_load_si512(C+1024*((i+2)&3)+64*t); acc[t]=_mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_mul_ps(sc,_mm512_set1_ps(D[t])), acc[t]); acc[t]=_mm512_fnmadd_ps(sc2,_mm512_set1_ps(D[16+t]),acc[t]); }
#define RUN(name, body) { __m512 acc[16]; for(int t=0;t<16;t++)acc[t]=_mm512_setzero_ps(); __m512 sc=_mm512_set1_ps(1.0001f), sc2=_mm512_set1_ps(0.5f); double t0=now(); for(long i=0;i<N;i++){ body } double dt=now()-t0; float s=0; for(int t=0;t<16;t++) s+=_mm512_reduce_add_ps(acc[t]); printf("%-40s %.1f ns/iter %.0f GMAC/s(at 8192/iter) %g\n", name, dt/N*1e9, N*8192.0/dt/1e9, s);}
int main(int argc,char**argv){
  syscall(SYS_arch_prctl, 0x1023, 18);
  cfg_t c; memset(&c,0,sizeof c); c.palette=1;
  for(int t=0;t<8;t++){c.rows[t]=16;c.colsb[t]=64;}
  int K=32;
  c.colsb[2]=K; c.rows[3]=K/4; c.colsb[4]=K; c.rows[5]=K/4;
  _tile_loadconfig(&c);
  long N=2000000;
  for(int i=0;i<32;i++) D[i]=1e-3f;
  RUN("epi only", EPI(0,16))
  RUN("amx only", if(i&1){_tile_loadd(2,A+(i&63)*512,32);_tile_loadd(3,B+(i&63)*512,64);_tile_zero(0);_tile_dpbusd(0,2,3);_tile_stored(1,C+1024*(i&3),64);}else{_tile_loadd(4,A+(i&63)*512,32);_tile_loadd(5,B+(i&63)*512,64);_tile_zero(1);_tile_dpbusd(1,4,5);_tile_stored(0,C+1024*(i&3),64);})
  RUN("amx then epi", if(i&1){_tile_loadd(2,A+(i&63)*512,32);_tile_loadd(3,B+(i&63)*512,64);_tile_zero(0);_tile_dpbusd(0,2,3);_tile_stored(1,C+1024*(i&3),64);}else{_tile_loadd(4,A+(i&63)*512,32);_tile_loadd(5,B+(i&63)*512,64);_tile_zero(1);_tile_dpbusd(1,4,5);_tile_stored(0,C+1024*(i&3),64);} EPI(0,16))
  RUN("interleaved", if(i&1){_tile_loadd(2,A+(i&63)*512,32);EPI(0,4) _tile_loadd(3,B+(i&63)*512,64);EPI(4,8) _tile_zero(0);_tile_dpbusd(0,2,3);EPI(8,12) _tile_stored(1,C+1024*(i&3),64);EPI(12,16)}else{_tile_loadd(4,A+(i&63)*512,32);EPI(0,4)_tile_loadd(5,B+(i&63)*512,64);EPI(4,8)_tile_zero(1);_tile_dpbusd(1,4,5);EPI(8,12)_tile_stored(0,C+1024*(i&3),64);EPI(12,16)})
  RUN("store+epi", if(i&1){_tile_stored(1,C+1024*(i&3),64);}else{_tile_stored(0,C+1024*(i&3),64);} EPI(0,16))
  RUN("tdp+epi", if(i&1){_tile_zero(0);_tile_dpbusd(0,2,3);}else{_tile_zero(1);_tile_dpbusd(1,4,5);} EPI(0,16))
  _tile_release();
}
