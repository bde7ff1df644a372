//go:build amd64 && !purego

#include "textflag.h"

// AES-256-GCM's two halves with VAES and VPCLMULQDQ on 512-bit registers,
// four blocks to a register, sixteen to a loop: the CTR keystream
// (ctrBlocks), GHASH (ghashBlocks), and both in one pass for decryption
// (gcmOpenBlocks). gcm_amd64.go puts them together.
//
// GHASH works on blocks byte-reversed into registers, so that a block's
// first byte is the top of a 128-bit integer, and multiplies by H
// premultiplied by x (see hPrime), so that a carry-less product reduces
// with two folds by the constant 0xC2 << 120 + 1 (gcmPoly). Sixteen
// blocks X1..X16 fold into the accumulator A as
// (A+X1)H^16 + X2 H^15 + ... + X16 H, one reduction for all sixteen.

DATA bswapMask<>+0(SB)/8, $0x08090a0b0c0d0e0f
DATA bswapMask<>+8(SB)/8, $0x0001020304050607
GLOBL bswapMask<>(SB), RODATA|NOPTR, $16

DATA gcmPoly<>+0(SB)/8, $0x0000000000000001
DATA gcmPoly<>+8(SB)/8, $0xc200000000000000
GLOBL gcmPoly<>(SB), RODATA|NOPTR, $16

// The counters of a register's four blocks, and their step: added to the
// byte-reversed counter block, whose low 32 bits are GCM's counter.
DATA ctrLanes<>+0(SB)/8, $0
DATA ctrLanes<>+8(SB)/8, $0
DATA ctrLanes<>+16(SB)/8, $1
DATA ctrLanes<>+24(SB)/8, $0
DATA ctrLanes<>+32(SB)/8, $2
DATA ctrLanes<>+40(SB)/8, $0
DATA ctrLanes<>+48(SB)/8, $3
DATA ctrLanes<>+56(SB)/8, $0
GLOBL ctrLanes<>(SB), RODATA|NOPTR, $64

DATA ctrStep<>+0(SB)/8, $4
DATA ctrStep<>+8(SB)/8, $0
DATA ctrStep<>+16(SB)/8, $4
DATA ctrStep<>+24(SB)/8, $0
DATA ctrStep<>+32(SB)/8, $4
DATA ctrStep<>+40(SB)/8, $0
DATA ctrStep<>+48(SB)/8, $4
DATA ctrStep<>+56(SB)/8, $0
GLOBL ctrStep<>(SB), RODATA|NOPTR, $64

// AES4, AESLAST4 and XOR4 apply a round key (or its XOR) to the four
// registers of blocks Z4-Z7; XORSTORE4 XORs them with 256 bytes at SI
// and stores the result at DI.
#define AES4(k) VAESENC k, Z4, Z4; VAESENC k, Z5, Z5; VAESENC k, Z6, Z6; VAESENC k, Z7, Z7
#define AESLAST4(k) VAESENCLAST k, Z4, Z4; VAESENCLAST k, Z5, Z5; VAESENCLAST k, Z6, Z6; VAESENCLAST k, Z7, Z7
#define XOR4(k) VPXORQ k, Z4, Z4; VPXORQ k, Z5, Z5; VPXORQ k, Z6, Z6; VPXORQ k, Z7, Z7
#define XORSTORE4 \
	VPXORQ 0(SI), Z4, Z4 \
	VPXORQ 64(SI), Z5, Z5 \
	VPXORQ 128(SI), Z6, Z6 \
	VPXORQ 192(SI), Z7, Z7 \
	VMOVDQU64 Z4, 0(DI) \
	VMOVDQU64 Z5, 64(DI) \
	VMOVDQU64 Z6, 128(DI) \
	VMOVDQU64 Z7, 192(DI)

// LOADKEYS puts the 15 round keys at AX into Z16-Z30, each in all four
// lanes; CLEARKEYS clears them again (VZEROUPPER leaves Z16-Z31).
#define LOADKEYS \
	VBROADCASTI32X4 0(AX), Z16 \
	VBROADCASTI32X4 16(AX), Z17 \
	VBROADCASTI32X4 32(AX), Z18 \
	VBROADCASTI32X4 48(AX), Z19 \
	VBROADCASTI32X4 64(AX), Z20 \
	VBROADCASTI32X4 80(AX), Z21 \
	VBROADCASTI32X4 96(AX), Z22 \
	VBROADCASTI32X4 112(AX), Z23 \
	VBROADCASTI32X4 128(AX), Z24 \
	VBROADCASTI32X4 144(AX), Z25 \
	VBROADCASTI32X4 160(AX), Z26 \
	VBROADCASTI32X4 176(AX), Z27 \
	VBROADCASTI32X4 192(AX), Z28 \
	VBROADCASTI32X4 208(AX), Z29 \
	VBROADCASTI32X4 224(AX), Z30

#define CLEARKEYS \
	VPXORQ Z16, Z16, Z16 \
	VPXORQ Z17, Z17, Z17 \
	VPXORQ Z18, Z18, Z18 \
	VPXORQ Z19, Z19, Z19 \
	VPXORQ Z20, Z20, Z20 \
	VPXORQ Z21, Z21, Z21 \
	VPXORQ Z22, Z22, Z22 \
	VPXORQ Z23, Z23, Z23 \
	VPXORQ Z24, Z24, Z24 \
	VPXORQ Z25, Z25, Z25 \
	VPXORQ Z26, Z26, Z26 \
	VPXORQ Z27, Z27, Z27 \
	VPXORQ Z28, Z28, Z28 \
	VPXORQ Z29, Z29, Z29 \
	VPXORQ Z30, Z30, Z30

// func ctrBlocks(rk *[240]byte, ctr *[16]byte, dst, src *byte, n int)
// XORs n blocks (a multiple of 4; any rest is left alone) of src with the keystream from the
// counter block *ctr into dst, and leaves *ctr at the next counter.
TEXT ·ctrBlocks(SB), NOSPLIT, $0-40
	MOVQ rk+0(FP), AX
	MOVQ ctr+8(FP), BX
	MOVQ dst+16(FP), DI
	MOVQ src+24(FP), SI
	MOVQ n+32(FP), CX
	VBROADCASTI32X4 bswapMask<>(SB), Z2
	LOADKEYS
	VBROADCASTI32X4 (BX), Z0
	VPSHUFB Z2, Z0, Z0
	VPADDD ctrLanes<>(SB), Z0, Z0
	VMOVDQU64 ctrStep<>(SB), Z1
	CMPQ CX, $16
	JB ctr4

ctr16:
	VPSHUFB Z2, Z0, Z4
	VPADDD Z1, Z0, Z0
	VPSHUFB Z2, Z0, Z5
	VPADDD Z1, Z0, Z0
	VPSHUFB Z2, Z0, Z6
	VPADDD Z1, Z0, Z0
	VPSHUFB Z2, Z0, Z7
	VPADDD Z1, Z0, Z0
	XOR4(Z16)
	AES4(Z17)
	AES4(Z18)
	AES4(Z19)
	AES4(Z20)
	AES4(Z21)
	AES4(Z22)
	AES4(Z23)
	AES4(Z24)
	AES4(Z25)
	AES4(Z26)
	AES4(Z27)
	AES4(Z28)
	AES4(Z29)
	AESLAST4(Z30)
	XORSTORE4
	ADDQ $256, SI
	ADDQ $256, DI
	SUBQ $16, CX
	CMPQ CX, $16
	JAE ctr16

ctr4:
	CMPQ CX, $4
	JB ctrdone
	VPSHUFB Z2, Z0, Z4
	VPADDD Z1, Z0, Z0
	VPXORQ Z16, Z4, Z4
	VAESENC Z17, Z4, Z4
	VAESENC Z18, Z4, Z4
	VAESENC Z19, Z4, Z4
	VAESENC Z20, Z4, Z4
	VAESENC Z21, Z4, Z4
	VAESENC Z22, Z4, Z4
	VAESENC Z23, Z4, Z4
	VAESENC Z24, Z4, Z4
	VAESENC Z25, Z4, Z4
	VAESENC Z26, Z4, Z4
	VAESENC Z27, Z4, Z4
	VAESENC Z28, Z4, Z4
	VAESENC Z29, Z4, Z4
	VAESENCLAST Z30, Z4, Z4
	VPXORQ (SI), Z4, Z4
	VMOVDQU64 Z4, (DI)
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $4, CX
	JMP ctr4

ctrdone:
	VPSHUFB X2, X0, X0
	VMOVDQU X0, (BX)
	CLEARKEYS
	VZEROUPPER
	RET

// REDUCE folds the 256-bit product hi:lo into acc (all X registers);
// poly holds gcmPoly, t is scratch. lo is clobbered.
#define REDUCE(lo, hi, poly, t, acc) \
	VPCLMULQDQ $0x01, lo, poly, t \
	VPSHUFD $0x4e, lo, lo \
	VPXOR t, lo, lo \
	VPCLMULQDQ $0x01, lo, poly, t \
	VPSHUFD $0x4e, lo, lo \
	VPXOR t, lo, lo \
	VPXOR hi, lo, acc

// FOLD16 folds the four lanes' products of a 16-block step, low halves
// in Z14, high in Z8, middle in Z9, into the accumulator X0 (gcmPoly in
// X1); Z15 is scratch.
#define FOLD16 \
	VPSLLDQ $8, Z9, Z15 \
	VPSRLDQ $8, Z9, Z9 \
	VPXORQ Z15, Z14, Z14 \
	VPXORQ Z9, Z8, Z8 \
	VEXTRACTI64X4 $1, Z14, Y15 \
	VPXOR Y15, Y14, Y14 \
	VEXTRACTI128 $1, Y14, X15 \
	VPXOR X15, X14, X14 \
	VEXTRACTI64X4 $1, Z8, Y15 \
	VPXOR Y15, Y8, Y8 \
	VEXTRACTI128 $1, Y8, X15 \
	VPXOR X15, X8, X8 \
	REDUCE(X14, X8, X1, X15, X0)

// func ghashBlocks(acc *[16]byte, hpow *[256]byte, data *byte, n int)
// Folds n 16-byte blocks of data into *acc (held byte-reversed); hpow
// holds H^16..H^1, premultiplied, in that order.
TEXT ·ghashBlocks(SB), NOSPLIT, $0-32
	MOVQ acc+0(FP), DI
	MOVQ hpow+8(FP), SI
	MOVQ data+16(FP), DX
	MOVQ n+24(FP), CX
	VMOVDQU (DI), X0
	VMOVDQU gcmPoly<>(SB), X1
	VBROADCASTI32X4 bswapMask<>(SB), Z2
	CMPQ CX, $16
	JB ghash1
	VMOVDQU64 0(SI), Z4
	VMOVDQU64 64(SI), Z5
	VMOVDQU64 128(SI), Z6
	VMOVDQU64 192(SI), Z7

ghash16:
	VMOVDQU64 0(DX), Z10
	VMOVDQU64 64(DX), Z11
	VMOVDQU64 128(DX), Z12
	VMOVDQU64 192(DX), Z13
	VPSHUFB Z2, Z10, Z10
	VPSHUFB Z2, Z11, Z11
	VPSHUFB Z2, Z12, Z12
	VPSHUFB Z2, Z13, Z13
	VPXORQ Z0, Z10, Z10
	VPCLMULQDQ $0x00, Z4, Z10, Z14
	VPCLMULQDQ $0x00, Z5, Z11, Z15
	VPXORQ Z15, Z14, Z14
	VPCLMULQDQ $0x00, Z6, Z12, Z15
	VPXORQ Z15, Z14, Z14
	VPCLMULQDQ $0x00, Z7, Z13, Z15
	VPXORQ Z15, Z14, Z14
	VPCLMULQDQ $0x11, Z4, Z10, Z8
	VPCLMULQDQ $0x11, Z5, Z11, Z15
	VPXORQ Z15, Z8, Z8
	VPCLMULQDQ $0x11, Z6, Z12, Z15
	VPXORQ Z15, Z8, Z8
	VPCLMULQDQ $0x11, Z7, Z13, Z15
	VPXORQ Z15, Z8, Z8
	VPCLMULQDQ $0x01, Z4, Z10, Z9
	VPCLMULQDQ $0x10, Z4, Z10, Z15
	VPXORQ Z15, Z9, Z9
	VPCLMULQDQ $0x01, Z5, Z11, Z15
	VPXORQ Z15, Z9, Z9
	VPCLMULQDQ $0x10, Z5, Z11, Z15
	VPXORQ Z15, Z9, Z9
	VPCLMULQDQ $0x01, Z6, Z12, Z15
	VPXORQ Z15, Z9, Z9
	VPCLMULQDQ $0x10, Z6, Z12, Z15
	VPXORQ Z15, Z9, Z9
	VPCLMULQDQ $0x01, Z7, Z13, Z15
	VPXORQ Z15, Z9, Z9
	VPCLMULQDQ $0x10, Z7, Z13, Z15
	VPXORQ Z15, Z9, Z9
	FOLD16
	ADDQ $256, DX
	SUBQ $16, CX
	CMPQ CX, $16
	JAE ghash16

ghash1:
	TESTQ CX, CX
	JE ghashdone
	VMOVDQU 240(SI), X4

ghash1loop:
	VMOVDQU (DX), X10
	VPSHUFB X2, X10, X10
	VPXOR X0, X10, X10
	VPCLMULQDQ $0x00, X4, X10, X14
	VPCLMULQDQ $0x11, X4, X10, X8
	VPCLMULQDQ $0x01, X4, X10, X9
	VPCLMULQDQ $0x10, X4, X10, X15
	VPXOR X15, X9, X9
	VPSLLDQ $8, X9, X15
	VPSRLDQ $8, X9, X9
	VPXOR X15, X14, X14
	VPXOR X9, X8, X8
	REDUCE(X14, X8, X1, X15, X0)
	ADDQ $16, DX
	DECQ CX
	JNE ghash1loop

ghashdone:
	VMOVDQU X0, (DI)
	VZEROUPPER
	RET

// SPREAD sets each 32-bit word of x to the XOR of it and the words below
// it: the running XOR by which each round key's words follow from the
// last-but-one round key's (FIPS 197, 5.2). X4 is scratch.
#define SPREAD(x) \
	VPSLLDQ $4, x, X4 \
	VPXOR X4, x, x \
	VPSLLDQ $4, X4, X4 \
	VPXOR X4, x, x \
	VPSLLDQ $4, X4, X4 \
	VPXOR X4, x, x

// KEYEVEN makes round key 2i in X1 from X1 (key 2i-2) and X3 (key 2i-1),
// with SubWord(RotWord(last word of X3)) ^ rcon, and stores it at off.
#define KEYEVEN(rcon, off) \
	AESKEYGENASSIST $rcon, X3, X2 \
	VPSHUFD $0xff, X2, X2 \
	SPREAD(X1) \
	VPXOR X2, X1, X1 \
	VMOVDQU X1, off(DI)

// KEYODD makes round key 2i+1 in X3 from X3 (key 2i-1) and X1 (key 2i),
// with SubWord(last word of X1), and stores it at off.
#define KEYODD(off) \
	AESKEYGENASSIST $0x00, X1, X2 \
	VPSHUFD $0xaa, X2, X2 \
	SPREAD(X3) \
	VPXOR X2, X3, X3 \
	VMOVDQU X3, off(DI)

// func expandKey256(key *[32]byte, rk *[240]byte)
// The AES-256 key schedule: 15 round keys, in the byte order AESENC
// takes them. AESKEYGENASSIST does the S-box lookups, so no secret byte
// indexes a table.
TEXT ·expandKey256(SB), NOSPLIT, $0-16
	MOVQ key+0(FP), AX
	MOVQ rk+8(FP), DI
	VMOVDQU 0(AX), X1
	VMOVDQU 16(AX), X3
	VMOVDQU X1, 0(DI)
	VMOVDQU X3, 16(DI)
	KEYEVEN(0x01, 32)
	KEYODD(48)
	KEYEVEN(0x02, 64)
	KEYODD(80)
	KEYEVEN(0x04, 96)
	KEYODD(112)
	KEYEVEN(0x08, 128)
	KEYODD(144)
	KEYEVEN(0x10, 160)
	KEYODD(176)
	KEYEVEN(0x20, 192)
	KEYODD(208)
	KEYEVEN(0x40, 224)
	VPXOR X1, X1, X1
	VPXOR X2, X2, X2
	VPXOR X3, X3, X3
	VPXOR X4, X4, X4
	RET

// func gcmOpenBlocks(rk *[240]byte, hpow *[256]byte, acc, ctr *[16]byte, dst, src *byte, n int)
// Decrypts n blocks (a multiple of 16; any rest is left alone) of src
// into dst with the keystream from *ctr, folding the ciphertext into
// *acc as ghashBlocks does, in one pass over the ciphertext (each
// stretch read into registers for GHASH and again, from the cache, for
// the XOR), the AES rounds running beside the carry-less multiplies. dst
// may be src exactly: a stretch is read before it is written. Leaves
// *ctr at the next counter.
TEXT ·gcmOpenBlocks(SB), NOSPLIT, $0-56
	MOVQ rk+0(FP), AX
	MOVQ hpow+8(FP), BX
	MOVQ acc+16(FP), R8
	MOVQ ctr+24(FP), R9
	MOVQ dst+32(FP), DI
	MOVQ src+40(FP), SI
	MOVQ n+48(FP), CX
	VBROADCASTI32X4 bswapMask<>(SB), Z2
	LOADKEYS
	VMOVDQU (R8), X0
	VMOVDQU gcmPoly<>(SB), X1
	VBROADCASTI32X4 (R9), Z3
	VPSHUFB Z2, Z3, Z3
	VPADDD ctrLanes<>(SB), Z3, Z3
	VMOVDQU64 ctrStep<>(SB), Z31

open16:
	CMPQ CX, $16
	JB opendone
	VPSHUFB Z2, Z3, Z4
	VPADDD Z31, Z3, Z3
	VPSHUFB Z2, Z3, Z5
	VPADDD Z31, Z3, Z3
	VPSHUFB Z2, Z3, Z6
	VPADDD Z31, Z3, Z3
	VPSHUFB Z2, Z3, Z7
	VPADDD Z31, Z3, Z3
	VMOVDQU64 0(SI), Z10
	VMOVDQU64 64(SI), Z11
	VMOVDQU64 128(SI), Z12
	VMOVDQU64 192(SI), Z13
	VPSHUFB Z2, Z10, Z10
	VPSHUFB Z2, Z11, Z11
	VPSHUFB Z2, Z12, Z12
	VPSHUFB Z2, Z13, Z13
	VPXORQ Z0, Z10, Z10
	XOR4(Z16)
	AES4(Z17)
	VPCLMULQDQ $0x00, 0(BX), Z10, Z14
	VPCLMULQDQ $0x11, 0(BX), Z10, Z8
	VPCLMULQDQ $0x01, 0(BX), Z10, Z9
	AES4(Z18)
	VPCLMULQDQ $0x10, 0(BX), Z10, Z15
	VPXORQ Z15, Z9, Z9
	VPCLMULQDQ $0x00, 64(BX), Z11, Z15
	AES4(Z19)
	VPXORQ Z15, Z14, Z14
	VPCLMULQDQ $0x11, 64(BX), Z11, Z15
	VPXORQ Z15, Z8, Z8
	AES4(Z20)
	VPCLMULQDQ $0x01, 64(BX), Z11, Z15
	VPXORQ Z15, Z9, Z9
	VPCLMULQDQ $0x10, 64(BX), Z11, Z15
	AES4(Z21)
	VPXORQ Z15, Z9, Z9
	VPCLMULQDQ $0x00, 128(BX), Z12, Z15
	VPXORQ Z15, Z14, Z14
	AES4(Z22)
	VPCLMULQDQ $0x11, 128(BX), Z12, Z15
	VPXORQ Z15, Z8, Z8
	VPCLMULQDQ $0x01, 128(BX), Z12, Z15
	AES4(Z23)
	VPXORQ Z15, Z9, Z9
	VPCLMULQDQ $0x10, 128(BX), Z12, Z15
	VPXORQ Z15, Z9, Z9
	AES4(Z24)
	VPCLMULQDQ $0x00, 192(BX), Z13, Z15
	VPXORQ Z15, Z14, Z14
	VPCLMULQDQ $0x11, 192(BX), Z13, Z15
	AES4(Z25)
	VPXORQ Z15, Z8, Z8
	VPCLMULQDQ $0x01, 192(BX), Z13, Z15
	VPXORQ Z15, Z9, Z9
	AES4(Z26)
	VPCLMULQDQ $0x10, 192(BX), Z13, Z15
	VPXORQ Z15, Z9, Z9
	AES4(Z27)
	AES4(Z28)
	AES4(Z29)
	AESLAST4(Z30)
	XORSTORE4
	FOLD16
	ADDQ $256, SI
	ADDQ $256, DI
	SUBQ $16, CX
	JMP open16

opendone:
	VMOVDQU X0, (R8)
	VPSHUFB X2, X3, X3
	VMOVDQU X3, (R9)
	CLEARKEYS
	VZEROUPPER
	RET

// func encryptBlock(rk *[240]byte, dst, src *[16]byte)
// One AES-256 block: the tag's mask and H.
TEXT ·encryptBlock(SB), NOSPLIT, $0-24
	MOVQ rk+0(FP), AX
	MOVQ dst+8(FP), DI
	MOVQ src+16(FP), SI
	VMOVDQU (SI), X0
	VPXOR (AX), X0, X0
	VAESENC 16(AX), X0, X0
	VAESENC 32(AX), X0, X0
	VAESENC 48(AX), X0, X0
	VAESENC 64(AX), X0, X0
	VAESENC 80(AX), X0, X0
	VAESENC 96(AX), X0, X0
	VAESENC 112(AX), X0, X0
	VAESENC 128(AX), X0, X0
	VAESENC 144(AX), X0, X0
	VAESENC 160(AX), X0, X0
	VAESENC 176(AX), X0, X0
	VAESENC 192(AX), X0, X0
	VAESENC 208(AX), X0, X0
	VAESENCLAST 224(AX), X0, X0
	VMOVDQU X0, (DI)
	RET
