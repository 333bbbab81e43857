/* -*- mode: c; tab-width: 4; indent-tabs-mode: t; c-basic-offset: 4 -*-
 *
 * Copyright (c) 2009-2014, Erik Lindahl & David van der Spoel
 * All rights reserved.
 *
 * Redistribution and use in source and binary forms, with or without
 * modification, are permitted provided that the following conditions are met:
 *
 * 1. Redistributions of source code must retain the above copyright notice, this
 * list of conditions and the following disclaimer.
 *
 * 2. Redistributions in binary form must reproduce the above copyright notice,
 * this list of conditions and the following disclaimer in the documentation
 * and/or other materials provided with the distribution.
 *
 * THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS "AS IS"
 * AND ANY EXPRESS OR IMPLIED WARRANTIES, INCLUDING, BUT NOT LIMITED TO, THE
 * IMPLIED WARRANTIES OF MERCHANTABILITY AND FITNESS FOR A PARTICULAR PURPOSE ARE
 * DISCLAIMED. IN NO EVENT SHALL THE COPYRIGHT HOLDER OR CONTRIBUTORS BE LIABLE
 * FOR ANY DIRECT, INDIRECT, INCIDENTAL, SPECIAL, EXEMPLARY, OR CONSEQUENTIAL
 * DAMAGES (INCLUDING, BUT NOT LIMITED TO, PROCUREMENT OF SUBSTITUTE GOODS OR
 * SERVICES; LOSS OF USE, DATA, OR PROFITS; OR BUSINESS INTERRUPTION) HOWEVER
 * CAUSED AND ON ANY THEORY OF LIABILITY, WHETHER IN CONTRACT, STRICT LIABILITY,
 * OR TORT (INCLUDING NEGLIGENCE OR OTHERWISE) ARISING IN ANY WAY OUT OF THE USE
 * OF THIS SOFTWARE, EVEN IF ADVISED OF THE POSSIBILITY OF SUCH DAMAGE.
 */

/* Get HAVE_RPC_XDR_H, F77_FUNC from config.h if available */
#ifdef HAVE_CONFIG_H
#include <config.h>
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <limits.h>
#include <float.h>
#include <errno.h>

/* get fixed-width types if we are using ANSI C99 */
#ifdef HAVE_STDINT_H
#  include <stdint.h>
#elif (defined HAVE_INTTYPES_H)
#  include <inttypes.h>
#endif

#include <sys/types.h>
#define _FILE_OFFSET_BITS 64

#ifdef _WIN32
#  include <io.h>
#else /* __unix__ */
#  include <unistd.h>
#endif


#ifdef HAVE_RPC_XDR_H
#  include <rpc/rpc.h>
#  include <rpc/xdr.h>
#endif

#include "xdrfile.h"

/* Default FORTRAN name mangling is: lower case name, append underscore */
#ifndef F77_FUNC
#define F77_FUNC(name,NAME) name ## _
#endif

char *exdr_message[exdrNR] = {
	"OK",
	"Header",
	"String",
	"Double",
	"Integer",
	"Float",
	"Unsigned integer",
	"Compressed 3D coordinate",
	"Closing file",
	"Magic number",
	"Not enough memory",
	"End of file",
	"File not found"
};

/*
 * Declare our own XDR routines statically if no libraries are present.
 * Actual implementation is at the end of this file.
 *
 * We don't want the low-level XDR implementation as part of the Gromacs
 * documentation, so skip it for doxygen too...
 */
#if (!defined HAVE_RPC_XDR_H && !defined DOXYGEN)

enum xdr_op
{
	XDR_ENCODE = 0,
	XDR_DECODE = 1,
	XDR_FREE   = 2
};


/* We need integer types that are guaranteed to be 4 bytes wide.
 * If ANSI C99 headers were included they are already defined
 * as int32_t and uint32_t. Check, and if not define them ourselves.
 * Since it is just our workaround for missing ANSI C99 types, avoid adding
 * it to the doxygen documentation.
 */
#if !(defined INT32_MAX || defined DOXYGEN)
#    if (INT_MAX == 2147483647)
#        define int32_t int
#        define uint32_t unsigned int
#        define INT32_MAX 2147483647
#    elif (LONG_MAX == 2147483647)
#        define int32_t long
#        define uint32_t unsigned long
#        define INT32_MAX 2147483647L
#    else
#        error ERROR: No 32 bit wide integer type found!
#        error Use system XDR libraries instead, or update xdrfile.c
#    endif
#endif

typedef struct XDR XDR;

struct XDR
{
	enum xdr_op x_op;
	struct xdr_ops
	{
		int (*x_getlong) (XDR *__xdrs, int32_t *__lp);
		int (*x_putlong) (XDR *__xdrs, int32_t *__lp);
		int (*x_getbytes) (XDR *__xdrs, char *__addr, unsigned int __len);
		int (*x_putbytes) (XDR *__xdrs, char *__addr, unsigned int __len);
		/* two next routines are not 64-bit IO safe - don't use! */
		int64_t (*x_getpostn) (XDR *__xdrs);
		int (*x_setpostn) (XDR *__xdrs, int64_t __pos, int __whence);
		void (*x_destroy) (XDR *__xdrs);
	}
    *x_ops;
	char *x_private;
};

static int  xdr_int         (XDR *xdrs, int *ip);
static int  xdr_u_int       (XDR *xdrs, unsigned int *ip);
static int  xdr_float       (XDR *xdrs, float *ip);
static int  xdr_double      (XDR *xdrs, double *ip);
static int  xdr_string      (XDR *xdrs, char **ip, unsigned int maxsize);
static int  xdr_opaque      (XDR *xdrs, char *cp, unsigned int cnt);
static void xdrstdio_create (XDR *xdrs, FILE *fp, enum xdr_op xop);

#define xdr_getpos(xdrs)                                \
        (*(xdrs)->x_ops->x_getpostn)(xdrs)
#define xdr_setpos(xdrs, pos)                           \
        (*(xdrs)->x_ops->x_setpostn)(xdrs, pos)
#define xdr_destroy(xdrs)                                       \
        do {                                                    \
                if ((xdrs)->x_ops->x_destroy)                   \
                        (*(xdrs)->x_ops->x_destroy)(xdrs);      \
        } while (0)
#endif /* end of our own XDR declarations */


/** Contents of the abstract XDRFILE data structure.
 *
 *  @internal
 *
 *  This structure is used to provide an XDR file interface that is
 *  virtual identical to the standard UNIX fopen/fread/fwrite/fclose.
 */
struct XDRFILE
{
    FILE *   fp;       /**< pointer to standard C library file handle */
    XDR *    xdr;      /**< pointer to corresponding XDR handle       */
    char     mode;     /**< r=read, w=write, a=append                 */
    int *    buf1;     /**< Buffer for internal use                   */
    int      buf1size; /**< Current allocated length of buf1          */
    int *    buf2;     /**< Buffer for internal use                   */
    int      buf2size; /**< Current allocated length of buf2          */
};


/*************************************************************
 * Implementation of higher-level routines to read/write     *
 * portable data based on the XDR standard. These should be  *
 * called from C - see further down for Fortran77 wrappers.  *
 *************************************************************/

XDRFILE *
xdrfile_open(const char *path, const char *mode)
{
	char newmode[5];
	enum xdr_op xdrmode;
	XDRFILE *xfp;

	/* make sure XDR files are opened in binary mode... */
	if(*mode=='w' || *mode=='W')
    {
		sprintf(newmode,"wb+");
		xdrmode=XDR_ENCODE;
	} else if(*mode == 'a' || *mode == 'A')
    {
		sprintf(newmode,"ab+");
		xdrmode = XDR_ENCODE;
	} else if(*mode == 'r' || *mode == 'R')
    {
		sprintf(newmode,"rb");
		xdrmode = XDR_DECODE;
	} else /* cannot determine mode */
		return NULL;

	if((xfp=(XDRFILE *)malloc(sizeof(XDRFILE)))==NULL)
		return NULL;
	if((xfp->fp=fopen(path,newmode))==NULL)
    {
		free(xfp);
		return NULL;
	}
	if((xfp->xdr=(XDR *)malloc(sizeof(XDR)))==NULL)
    {
		fclose(xfp->fp);
		free(xfp);
		return NULL;
	}
	xfp->mode=*mode;
	xdrstdio_create((XDR *)(xfp->xdr),xfp->fp,xdrmode);
	xfp->buf1 = xfp->buf2 = NULL;
	xfp->buf1size = xfp->buf2size = 0;
	return xfp;
}

int
xdrfile_close(XDRFILE *xfp)
{
	int ret=exdrCLOSE;
	if(xfp)
    {
		/* flush and destroy XDR stream */
		if(xfp->xdr)
			xdr_destroy((XDR *)(xfp->xdr));
		free(xfp->xdr);
		/* close the file */
		ret=fclose(xfp->fp);
		if(xfp->buf1size)
			free(xfp->buf1);
		if(xfp->buf2size)
			free(xfp->buf2);
		free(xfp);
	}
	return ret; /* return 0 if ok */
}


/* trajscale: the three typed reads from one definition (each reads up to ndata values, returns how many) */
#define XDRFILE_READ(name, type, xdr_type)                          \
	int name(type *ptr, int ndata, XDRFILE* xfp)                    \
	{                                                               \
		int i = 0;                                                  \
		while (i < ndata && xdr_type((XDR *)(xfp->xdr), ptr + i))   \
			i++;                                                    \
		return i;                                                   \
	}

XDRFILE_READ(xdrfile_read_int, int, xdr_int)
XDRFILE_READ(xdrfile_read_float, float, xdr_float)
XDRFILE_READ(xdrfile_read_double, double, xdr_double)


int
xdrfile_read_string(char *ptr, int maxlen, XDRFILE* xfp)
{
	int i;
	if(xdr_string((XDR *)(xfp->xdr),&ptr,maxlen)) {
		i=0;
		while(i<maxlen && ptr[i]!=0)
			i++;
		if(i==maxlen)
			return maxlen;
		else
			return i+1;
	} else
		return 0;
}

int
xdrfile_read_opaque(char *ptr, int cnt, XDRFILE* xfp)
{
	if(xdr_opaque((XDR *)(xfp->xdr),ptr,cnt))
		return cnt;
	else
		return 0;
}


/* Internal support routines for reading/writing compressed coordinates
 * sizeofint - calculate smallest number of bits necessary
 * to represent a certain integer.
 */
static int
sizeofint(int size) {
    unsigned int num = 1;
    int num_of_bits = 0;

    while (size >= num && num_of_bits < 32)
    {
		num_of_bits++;
		num <<= 1;
    }
    return num_of_bits;
}


/*
 * sizeofints - calculate 'bitsize' of compressed ints
 *
 * given a number of small unsigned integers and the maximum value
 * return the number of bits needed to read or write them with the
 * routines encodeints/decodeints. You need this parameter when
 * calling those routines.
 * (However, in some cases we can just use the variable 'smallidx'
 * which is the exact number of bits, and them we dont need to call
 * this routine).
 */
static int
sizeofints(int num_of_ints, unsigned int sizes[])
{
    int i, num;
    unsigned int num_of_bytes, num_of_bits, bytes[32], bytecnt, tmp;
    num_of_bytes = 1;
    bytes[0] = 1;
    num_of_bits = 0;
    for (i=0; i < num_of_ints; i++)
    {
		tmp = 0;
		for (bytecnt = 0; bytecnt < num_of_bytes; bytecnt++)
        {
			tmp = bytes[bytecnt] * sizes[i] + tmp;
			bytes[bytecnt] = tmp & 0xff;
			tmp >>= 8;
		}
		while (tmp != 0)
        {
			bytes[bytecnt++] = tmp & 0xff;
			tmp >>= 8;
		}
		num_of_bytes = bytecnt;
    }
    num = 1;
    num_of_bytes--;
    while (bytes[num_of_bytes] >= num)
    {
		num_of_bits++;
		num *= 2;
    }
    return num_of_bits + num_of_bytes * 8;

}


static const int magicints[] =
{
    0, 0, 0, 0, 0, 0, 0, 0, 0, 8, 10, 12, 16, 20, 25, 32, 40, 50, 64,
    80, 101, 128, 161, 203, 256, 322, 406, 512, 645, 812, 1024, 1290,
    1625, 2048, 2580, 3250, 4096, 5060, 6501, 8192, 10321, 13003,
    16384, 20642, 26007, 32768, 41285, 52015, 65536,82570, 104031,
    131072, 165140, 208063, 262144, 330280, 416127, 524287, 660561,
    832255, 1048576, 1321122, 1664510, 2097152, 2642245, 3329021,
    4194304, 5284491, 6658042, 8388607, 10568983, 13316085, 16777216
};

#define FIRSTIDX 9
/* note that magicints[FIRSTIDX-1] == 0 */
#define LASTIDX (sizeof(magicints) / sizeof(*magicints))

/* Compressed coordinate routines - modified from the original
 * implementation by Frans v. Hoesel to make them threadsafe.
 */
/* trajscale: the decoder stops once n_want atoms are decoded (XTC is decoded in atom order, so the
 * first atoms of a frame are the same bits whether or not the rest is decoded); the full decoder,
 * xdrfile_decompress_coord_float, is this with every atom wanted.
 *
 * trajscale: every field is checked before it is used, and a frame that fails a check returns one
 * of the XTC_BAD_* codes (xdrfile.h) instead of being decoded: files from crashed runs, full disks
 * and bad copies reach this code, and the unchecked original overran its buffers, divided by zero
 * or indexed magicints out of bounds on them. The checks are O(1) per frame, plus one compare per
 * decoded group of atoms for the bit reads. */
long long
xdrfile_xtc_max_bytes(int natoms)
{
	/* The encoder's buffer: 1.2 ints per coordinate (GROMACS's xdrfile, libxdrf); a valid frame's
	 * compressed bytes fit in it. */
	return natoms < 0 ? -1 : 4LL * (long long)(unsigned int)((unsigned int)natoms * 3u * 1.2);
}

int
xdrfile_xtc_check_ranges(const int minint[3], const int maxint[3])
{
	int d;
	for (d = 0; d < 3; d++)
	{
		/* the range is computed in 64 bits: maxint - minint + 1 overflows int on extreme values, and a
		 * range of 0 divides by zero in decodeints; beyond 31 bits decodebits' mask overflows */
		long long range = (long long)maxint[d] - (long long)minint[d] + 1;
		if (range < 1 || range > INT_MAX)
			return XTC_BAD_RANGE;
	}
	return 0;
}

/* trajscale: bytes after the compressed data that a group of atoms can read before the bound is
 * checked: 3 x 31 bits, a flag and a run length (6 bits), 10 atoms of at most 72 bits (103 bytes in
 * all), and the 9 bytes the bit reader's window reads from its position on. */
#define XTC_SLACK_BYTES 128

/* trajscale: the decoder below reads the same bits as decodebits and decodeints and gives the same
 * floats, faster (the original's functions are kept for the double-precision decoder):
 *
 * - a bit is found by its position from the start of the compressed bytes, and up to 64 bits at once
 *   through a window of the 9 bytes from it (xtc_window), not a byte at a time through buf2[0..2];
 * - decodeints' big number (its first byte read is its lowest) has at most 64 bits in nearly every
 *   frame (bitsize, or smallidx, <= 64): it is taken from the window whole (xtc_bignum) and split by
 *   64-bit (up to 32 bits, 32-bit) division, not by a base-256 long division for each size; wider
 *   numbers (65 to 72 bits) keep decodeints' byte-wise division (xtc_unpack_wide);
 * - the integer coordinates are written to buf1 in the order they are output, and made floats a
 *   chunk of atoms at a time (the same conversion and float product for every value).
 *
 * Every check of the original's trajscale version is kept, in the same order, with the same codes. */

/* atoms made floats at a time: their ints (6 KB) are still in the cache */
#define XTC_CHUNK_ATOMS 512

static inline uint64_t
xtc_bswap64(uint64_t x)
{
#if defined(__GNUC__) || defined(__clang__)
	return __builtin_bswap64(x);
#else
	x = (x << 32) | (x >> 32);
	x = ((x & 0x0000ffff0000ffffULL) << 16) | ((x >> 16) & 0x0000ffff0000ffffULL);
	return ((x & 0x00ff00ff00ff00ffULL) << 8) | ((x >> 8) & 0x00ff00ff00ff00ffULL);
#endif
}

/* the 64 bits from bit position pos of cbuf on, the first one highest (reads bytes pos / 8 to
 * pos / 8 + 8) */
static inline uint64_t
xtc_window(const unsigned char *cbuf, uint64_t pos)
{
	const unsigned char *p = cbuf + (pos >> 3);
	unsigned int shift = (unsigned int)(pos & 7);
	uint64_t w = ((uint64_t)p[0] << 56) | ((uint64_t)p[1] << 48) | ((uint64_t)p[2] << 40) |
		((uint64_t)p[3] << 32) | ((uint64_t)p[4] << 24) | ((uint64_t)p[5] << 16) | ((uint64_t)p[6] << 8) |
		(uint64_t)p[7];
	/* (when shift is 0, p[8] >> 8 is 0) */
	return (w << shift) | (uint64_t)(p[8] >> (8 - shift));
}

/* decodebits: the next n bits (1 <= n <= 32) as a number */
static inline unsigned int
xtc_bits(const unsigned char *cbuf, uint64_t *pos, int n)
{
	unsigned int num = (unsigned int)(xtc_window(cbuf, *pos) >> (64 - n));
	*pos += (unsigned int)n;
	return num;
}

/* decodeints' big number of n bits (1 <= n <= 64): its whole bytes come first, lowest first, then
 * the n - 8 * whole bits of its highest byte */
static inline uint64_t
xtc_bignum(const unsigned char *cbuf, uint64_t *pos, int n)
{
	uint64_t w = xtc_window(cbuf, *pos) & (~(uint64_t)0 << (64 - n));
	int whole = 8 * ((n - 1) >> 3);   /* the bits in whole bytes: 0 to 56 */
	uint64_t s = xtc_bswap64(w);      /* the first byte read lowest; the last one's bits at its top */
	*pos += (unsigned int)n;
	return (s & (((uint64_t)1 << whole) - 1)) | ((((s >> whole) & 0xff) >> (8 - (n - whole))) << whole);
}

/* decodeints' three numbers in a big number: the remainder by size2, then the remainder of the
 * quotient by size1, then the low 32 bits of that quotient (a chain of divisions was measured faster
 * than a product by each size's inverse, or a division by size1 * size2 beside the first) */
static inline void
xtc_unpack64(uint64_t num, unsigned int size1, unsigned int size2, int nums[3])
{
	uint64_t q = num / size2;
	nums[2] = (int)(num - q * size2);
	num = q / size1;
	nums[1] = (int)(q - num * size1);
	nums[0] = (int)(unsigned int)num;
}

static inline void
xtc_unpack32(unsigned int num, unsigned int size1, unsigned int size2, int nums[3])
{
	unsigned int q = num / size2;
	nums[2] = (int)(num - q * size2);
	num = q / size1;
	nums[1] = (int)(q - num * size1);
	nums[0] = (int)num;
}

/* decodeints for a big number of 65 to 72 bits: its bytes, and a long division by each size */
static void
xtc_unpack_wide(const unsigned char *cbuf, uint64_t *pos, int num_of_bits, const unsigned int sizes[3],
				int nums[3])
{
	unsigned int bytes[32], num, p;
	int i, j, num_of_bytes = 0;

	bytes[1] = bytes[2] = bytes[3] = 0;
	while (num_of_bits > 8)
	{
		bytes[num_of_bytes++] = xtc_bits(cbuf, pos, 8);
		num_of_bits -= 8;
	}
	bytes[num_of_bytes++] = xtc_bits(cbuf, pos, num_of_bits);
	for (i = 2; i > 0; i--)
	{
		num = 0;
		for (j = num_of_bytes - 1; j >= 0; j--)
		{
			num = (num << 8) | bytes[j];
			p = num / sizes[i];
			bytes[j] = p;
			num -= p * sizes[i];
		}
		nums[i] = (int)num;
	}
	nums[0] = (int)(bytes[0] | (bytes[1] << 8) | (bytes[2] << 16) | (bytes[3] << 24));
}

/* decodeints: three numbers of sizes in a big number of num_of_bits bits */
static inline void
xtc_unpack(const unsigned char *cbuf, uint64_t *pos, int num_of_bits, const unsigned int sizes[3],
		   int nums[3])
{
	if (num_of_bits <= 32)
		xtc_unpack32((unsigned int)xtc_bignum(cbuf, pos, num_of_bits), sizes[1], sizes[2], nums);
	else if (num_of_bits <= 64)
		xtc_unpack64(xtc_bignum(cbuf, pos, num_of_bits), sizes[1], sizes[2], nums);
	else
		xtc_unpack_wide(cbuf, pos, num_of_bits, sizes, nums);
}

/* the original's float of each int: int * inv_precision (a float product), then times scale */
static void
xtc_to_float(const int *__restrict ints, float *__restrict out, size_t n, float inv_precision, float scale)
{
	size_t j;
	if (scale == 1.0f)
	{
		for (j = 0; j < n; j++)
			out[j] = ints[j] * inv_precision;
	}
	else
	{
		for (j = 0; j < n; j++)
		{
			float v = ints[j] * inv_precision;
			out[j] = v * scale;
		}
	}
}

int
xdrfile_decompress_coord_float_scaled(float     *ptr,
									  int       *size,
									  int        n_want,
									  float     *precision,
									  float      scale,
									  XDRFILE*   xfp)
{
	int minint[3], maxint[3];
	int smallidx, maxidx;
	unsigned sizeint[3], sizesmall[3], size3;
	int bitsizeint[3];
	int k, *buf1, *buf2, lsize, nbytes;
	int smallnum, smaller, i, done, is_smaller, run;
	float inv_precision;
	int tmp, *thiscoord, prevcoord[3], small[3];
	unsigned int flag_run;
	int bitsize;
	long long max_bytes;
	const unsigned char *cbuf;
	uint64_t pos, limit;

	bitsizeint[0] = bitsizeint[1] = bitsizeint[2] = 0;

	if(xfp==NULL || ptr==NULL)
		return -1;
	tmp=xdrfile_read_int(&lsize,1,xfp);
	if(tmp==0)
		return -1; /* return if we could not read size */
	/* trajscale: the count must fit the caller's buffer (*size atoms) and 3 * count an int; the
	 * original printed to stderr here, and allocated a negative count as a huge unsigned one */
	if (lsize < 0 || *size < lsize || lsize > INT_MAX / 4)
		return XTC_BAD_NATOMS;
	*size = lsize;
	size3 = *size * 3;
	max_bytes = xdrfile_xtc_max_bytes(lsize);
	if(size3>xfp->buf1size)
	{
		/* trajscale: the old buffers are freed (the original leaked them), and buf2 has room for the
		 * largest byte count accepted below plus XTC_SLACK_BYTES, zeroed, that bit reads may touch
		 * before their bound is checked */
		free(xfp->buf1);
		free(xfp->buf2);
		xfp->buf1 = xfp->buf2 = NULL;
		xfp->buf1size = xfp->buf2size = 0;
		if((xfp->buf1=(int *)malloc(sizeof(int)*size3))==NULL)
			return XTC_NOMEM;
		xfp->buf1size=size3;
		if((xfp->buf2=(int *)malloc((size_t)max_bytes + 3 * sizeof(int) + XTC_SLACK_BYTES))==NULL)
			return XTC_NOMEM;
		xfp->buf2size=(unsigned int)(max_bytes / 4 + 3 + XTC_SLACK_BYTES / 4);
	}
	/* Dont bother with compression for three atoms or less */
	if(*size<=9)
	{
		/* return number of coords, not floats */
		int got = xdrfile_read_float(ptr,size3,xfp)/3;
		if (scale != 1.0f)
			for (k = 0; k < 3 * got; k++)
				ptr[k] = ptr[k] * scale;
		return got;
	}
	/* Compression-time if we got here. Read precision first */
	if (xdrfile_read_float(precision,1,xfp) != 1)
		return -1;
	/* trajscale: finite and positive (NaN fails the first compare) */
	if (!(*precision > 0) || *precision > FLT_MAX)
		return XTC_BAD_PRECISION;

	/* avoid repeated pointer dereferencing. */
	buf1=xfp->buf1;
	buf2=xfp->buf2;
	/* buf2[0-2] are special and do not contain actual data */
	buf2[0] = buf2[1] = buf2[2] = 0;
	if (xdrfile_read_int(minint,3,xfp) != 3 || xdrfile_read_int(maxint,3,xfp) != 3)
		return -1;
	if (xdrfile_xtc_check_ranges(minint, maxint) != 0)
		return XTC_BAD_RANGE;

	sizeint[0] = maxint[0] - minint[0]+1;
	sizeint[1] = maxint[1] - minint[1]+1;
	sizeint[2] = maxint[2] - minint[2]+1;

	/* check if one of the sizes is to big to be multiplied */
	if ((sizeint[0] | sizeint[1] | sizeint[2] ) > 0xffffff)
	{
		bitsizeint[0] = sizeofint(sizeint[0]);
		bitsizeint[1] = sizeofint(sizeint[1]);
		bitsizeint[2] = sizeofint(sizeint[2]);
		bitsize = 0; /* flag the use of large sizes */
	}
	else
	{
		bitsize = sizeofints(3, sizeint);
	}

	if (xdrfile_read_int(&smallidx,1,xfp) == 0)
		return 0; /* not sure what has happened here or why we return... */
	/* trajscale: smallidx indexes magicints (and is a bit count up to 72) */
	if (smallidx < FIRSTIDX || smallidx >= (int)LASTIDX)
		return XTC_BAD_SMALLIDX;
	tmp=smallidx+8;
	/* trajscale: LASTIDX - 1, the table's last entry (the original read one past it) */
	maxidx = ((int)LASTIDX - 1<tmp) ? (int)LASTIDX - 1 : tmp;
	(void)maxidx;
	tmp = smallidx-1;
	tmp = (FIRSTIDX>tmp) ? FIRSTIDX : tmp;
	smaller = magicints[tmp] / 2;
	smallnum = magicints[smallidx] / 2;
	sizesmall[0] = sizesmall[1] = sizesmall[2] = magicints[smallidx] ;

	/* buf2[0] holds the length in bytes */

	if (xdrfile_read_int(buf2,1,xfp) == 0)
		return 0;
	/* trajscale: the byte count must fit the buffer (it overran the heap) */
	nbytes = buf2[0];
	if (nbytes < 0 || nbytes > max_bytes)
		return XTC_BAD_BYTECOUNT;
	if (xdrfile_read_opaque((char *)&(buf2[3]),(unsigned int)buf2[0],xfp) == 0)
		return 0;
	memset((char *)&(buf2[3]) + nbytes, 0, XTC_SLACK_BYTES);
	buf2[0] = buf2[1] = buf2[2] = 0;
	cbuf = (const unsigned char *)&(buf2[3]);
	pos = 0;
	limit = 8 * (uint64_t)nbytes;

	inv_precision = 1.0 / * precision;
	run = 0;
	i = 0;
	done = 0;   /* the atoms made floats */
	while ( i < lsize && i < n_want )
	{
		/* an atom in full, then maybe a run of atoms near it, each one near the one before */
		thiscoord = buf1 + (size_t)i * 3;

		if (bitsize == 0)
		{
			thiscoord[0] = (int)xtc_bits(cbuf, &pos, bitsizeint[0]);
			thiscoord[1] = (int)xtc_bits(cbuf, &pos, bitsizeint[1]);
			thiscoord[2] = (int)xtc_bits(cbuf, &pos, bitsizeint[2]);
		}
		else
		{
			xtc_unpack(cbuf, &pos, bitsize, sizeint, thiscoord);
		}

		i++;
		/* (unsigned: the original's int sums, which wrap alike on a damaged frame) */
		prevcoord[0] = thiscoord[0] = (int)((unsigned int)thiscoord[0] + (unsigned int)minint[0]);
		prevcoord[1] = thiscoord[1] = (int)((unsigned int)thiscoord[1] + (unsigned int)minint[1]);
		prevcoord[2] = thiscoord[2] = (int)((unsigned int)thiscoord[2] + (unsigned int)minint[2]);

		/* a flag bit; when set, 5 bits of run length and size step */
		flag_run = (unsigned int)(xtc_window(cbuf, pos) >> 58);
		is_smaller = 0;
		if (flag_run & 32)
		{
			pos += 6;
			run = (int)(flag_run & 31);
			is_smaller = run % 3;
			run -= is_smaller;
			is_smaller--;
		}
		else
		{
			pos += 1;
		}
		/* trajscale: a run never decodes past the frame's atom count (it overran buf1 and ptr) */
		if (run / 3 > lsize - i)
			return XTC_BAD_RUN;
		for (k = 0; k < run; k += 3)
		{
			int *next = thiscoord + 3 + k;
			xtc_unpack(cbuf, &pos, smallidx, sizesmall, small);
			i++;
			small[0] = (int)((unsigned int)small[0] + (unsigned int)prevcoord[0] - (unsigned int)smallnum);
			small[1] = (int)((unsigned int)small[1] + (unsigned int)prevcoord[1] - (unsigned int)smallnum);
			small[2] = (int)((unsigned int)small[2] + (unsigned int)prevcoord[2] - (unsigned int)smallnum);
			if (k == 0)
			{
				/* the first atom of a run is output before the atom in full, for better
				 * compression of water molecules */
				next[0] = thiscoord[0];
				next[1] = thiscoord[1];
				next[2] = thiscoord[2];
				thiscoord[0] = small[0];
				thiscoord[1] = small[1];
				thiscoord[2] = small[2];
			}
			else
			{
				next[0] = small[0];
				next[1] = small[1];
				next[2] = small[2];
			}
			prevcoord[0] = small[0];
			prevcoord[1] = small[1];
			prevcoord[2] = small[2];
		}
		smallidx += is_smaller;
		/* trajscale: the run's size step keeps smallidx within magicints */
		if (smallidx < FIRSTIDX || smallidx >= (int)LASTIDX)
			return XTC_BAD_SMALLIDX;
		if (is_smaller < 0)
		{
			smallnum = smaller;

			if (smallidx > FIRSTIDX)
			{
				smaller = magicints[smallidx - 1] /2;
			}
			else
			{
				smaller = 0;
			}
		}
		else if (is_smaller > 0)
		{
			smaller = smallnum;
			smallnum = magicints[smallidx] / 2;
		}
		sizesmall[0] = sizesmall[1] = sizesmall[2] = magicints[smallidx] ;
		/* trajscale: the bits read so far lie within the byte count (the slack after it is
		 * allocated and zeroed, so the group just decoded read no further than it) */
		if (pos > limit)
			return XTC_BAD_BITS;
		if (i - done >= XTC_CHUNK_ATOMS)
		{
			xtc_to_float(buf1 + (size_t)done * 3, ptr + (size_t)done * 3, (size_t)(i - done) * 3,
						 inv_precision, scale);
			done = i;
		}
	}
	xtc_to_float(buf1 + (size_t)done * 3, ptr + (size_t)done * 3, (size_t)(i - done) * 3, inv_precision, scale);
	return *size;
}



/* trajscale: reads only. The coordinate compression (writing XTC, in both precisions), its bit
 * encoders and the write routines are left out, as are the double-precision decompression and the
 * wrappers of the float one: nothing here calls them (XTC stores floats; a double array is converted
 * by the caller). */

/* trajscale: the Fortran 77 interface (F77_FUNC wrappers of every read and write above) is
 * left out: nothing here calls it. */

/*************************************************************
 * End of higher-level routines - dont change things below!  *
 *************************************************************/


/*************************************************************
 * The rest of this file contains our own implementation     *
 * of the XDR calls in case you are compiling without them.  *
 * You do NOT want to change things here since it would make *
 * things incompatible with the standard RPC/XDR routines.   *
 *************************************************************/
#ifndef HAVE_RPC_XDR_H

/*
 * What follows is a modified version of the Sun XDR code. For reference
 * we include their copyright and license:
 *
 * Sun RPC is a product of Sun Microsystems, Inc. and is provided for
 * unrestricted use provided that this legend is included on all tape
 * media and as a part of the software program in whole or part.  Users
 * may copy or modify Sun RPC without charge, but are not authorized
 * to license or distribute it to anyone else except as part of a product or
 * program developed by the user.
 *
 * SUN RPC IS PROVIDED AS IS WITH NO WARRANTIES OF ANY KIND INCLUDING THE
 * WARRANTIES OF DESIGN, MERCHANTIBILITY AND FITNESS FOR A PARTICULAR
 * PURPOSE, OR ARISING FROM A COURSE OF DEALING, USAGE OR TRADE PRACTICE.
 *
 * Sun RPC is provided with no support and without any obligation on the
 * part of Sun Microsystems, Inc. to assist in its use, correction,
 * modification or enhancement.
 *
 * SUN MICROSYSTEMS, INC. SHALL HAVE NO LIABILITY WITH RESPECT TO THE
 * INFRINGEMENT OF COPYRIGHTS, TRADE SECRETS OR ANY PATENTS BY SUN RPC
 * OR ANY PART THEREOF.
 *
 * In no event will Sun Microsystems, Inc. be liable for any lost revenue
 * or profits or other special, indirect and consequential damages, even if
 * Sun has been advised of the possibility of such damages.
 *
 * Sun Microsystems, Inc.
 * 2550 Garcia Avenue
 * Mountain View, California  94043
 */

/* INT_MAX is defined in limits.h according to ANSI C */
#if (INT_MAX > 2147483647)
#    error Error: Cannot use builtin XDR support when size of int
#    error is larger than 4 bytes. Use your system XDR libraries
#    error instead, or modify the source code in xdrfile.c
#endif /* Check for 4 byte int type */


typedef int (*xdrproc_t) (XDR *, void *,...);

#define xdr_getlong(xdrs, longp)			\
	(*(xdrs)->x_ops->x_getlong)(xdrs, longp)
#define xdr_putlong(xdrs, longp)			\
	(*(xdrs)->x_ops->x_putlong)(xdrs, longp)
#define xdr_getbytes(xdrs, addr, len)			\
	(*(xdrs)->x_ops->x_getbytes)(xdrs, addr, len)
#define xdr_putbytes(xdrs, addr, len)			\
	(*(xdrs)->x_ops->x_putbytes)(xdrs, addr, len)

#define BYTES_PER_XDR_UNIT 4
static char xdr_zero[BYTES_PER_XDR_UNIT] = {0, 0, 0, 0};

static int32_t
xdr_swapbytes(int32_t x)
{
	int32_t y,i;
	char *px=(char *)&x;
	char *py=(char *)&y;

	for(i=0;i<4;i++)
		py[i]=px[3-i];

	return y;
}

static int32_t
xdr_htonl(int32_t x)
{
	int s=0x1234;
	if( *((char *)&s)==(char)0x34) {
		/* smallendian,swap bytes */
		return xdr_swapbytes(x);
	} else {
		/* bigendian, do nothing */
		return x;
	}
}

/* trajscale: the same byte swap as xdr_htonl (its own copy before) */
static int32_t
xdr_ntohl(int x)
{
	return xdr_htonl(x);
}

static int
xdr_int (XDR *xdrs, int *ip)
{
	int32_t i32;

	switch (xdrs->x_op)
		{
		case XDR_ENCODE:
			i32 = (int32_t) *ip;
			return xdr_putlong (xdrs, &i32);

		case XDR_DECODE:
			if (!xdr_getlong (xdrs, &i32))
				{
					return 0;
				}
			*ip = (int) i32;
		case XDR_FREE:
			return 1;
		}
	return 0;
}

static int
xdr_u_int (XDR *xdrs, unsigned int *up)
{
	uint32_t ui32;

	switch (xdrs->x_op)
		{
		case XDR_ENCODE:
			ui32 = (uint32_t) * up;
			return xdr_putlong (xdrs, (int32_t *)&ui32);

		case XDR_DECODE:
			if (!xdr_getlong (xdrs, (int32_t *)&ui32))
				{
					return 0;
				}
			*up = (uint32_t) ui32;
		case XDR_FREE:
			return 1;
		}
	return 0;
}


/*
 * XDR opaque data
 * Allows the specification of a fixed size sequence of opaque bytes.
 * cp points to the opaque object and cnt gives the byte length.
 */
static int
xdr_opaque (XDR *xdrs, char *cp, unsigned int cnt)
{
	unsigned int rndup;
	static char crud[BYTES_PER_XDR_UNIT];

	/*
	 * if no data we are done
	 */
	if (cnt == 0)
		return 1;

	/*
	 * round byte count to full xdr units
	 */
	rndup = cnt % BYTES_PER_XDR_UNIT;
	if (rndup > 0)
		rndup = BYTES_PER_XDR_UNIT - rndup;

	switch (xdrs->x_op)
		{
		case XDR_DECODE:
			if (!xdr_getbytes (xdrs, cp, cnt))
				{
					return 0;
				}
			if (rndup == 0)
				return 1;
			return xdr_getbytes (xdrs, (char *)crud, rndup);

		case XDR_ENCODE:
			if (!xdr_putbytes (xdrs, cp, cnt))
				{
					return 0;
				}
			if (rndup == 0)
				return 1;
			return xdr_putbytes (xdrs, xdr_zero, rndup);

		case XDR_FREE:
			return 1;
		}
#undef BYTES_PER_XDR_UNIT
	return 0;
}


/*
 * XDR null terminated ASCII strings
 */
static int
xdr_string (XDR *xdrs, char **cpp, unsigned int maxsize)
{
	char *sp = *cpp;	/* sp is the actual string pointer */
	unsigned int size;
	unsigned int nodesize;

	/*
	 * first deal with the length since xdr strings are counted-strings
	 */
	switch (xdrs->x_op)
		{
		case XDR_FREE:
			if (sp == NULL)
				{
					return 1;		/* already free */
				}
			/* fall through... */
		case XDR_ENCODE:
			if (sp == NULL)
				return 0;
			size = strlen (sp);
			break;
		case XDR_DECODE:
			break;
		}
	if (!xdr_u_int (xdrs, &size))
		{
			return 0;
		}
	if (size > maxsize)
		{
			return 0;
		}
	nodesize = size + 1;

	/*
	 * now deal with the actual bytes
	 */
	switch (xdrs->x_op)
		{
		case XDR_DECODE:
			if (nodesize == 0)
				{
					return 1;
				}
			if (sp == NULL)
				*cpp = sp = (char *) malloc (nodesize);
			if (sp == NULL)
				{
					(void) fputs ("xdr_string: out of memory\n", stderr);
					return 0;
				}
			sp[size] = 0;
			/* fall into ... */

		case XDR_ENCODE:
			return xdr_opaque (xdrs, sp, size);

		case XDR_FREE:
			free (sp);
			*cpp = NULL;
			return 1;
		}
	return 0;
}


/* Floating-point stuff */

static int
xdr_float(XDR *xdrs, float *fp)
{
	switch (xdrs->x_op) {

	case XDR_ENCODE:
		if (sizeof(float) == sizeof(int32_t))
			return (xdr_putlong(xdrs, (int32_t *)fp));
		else if (sizeof(float) == sizeof(int)) {
			int32_t tmp = *(int *)fp;
			return (xdr_putlong(xdrs, &tmp));
		}
		break;

	case XDR_DECODE:
		if (sizeof(float) == sizeof(int32_t))
			return (xdr_getlong(xdrs, (int32_t *)fp));
		else if (sizeof(float) == sizeof(int)) {
			int32_t tmp;
			if (xdr_getlong(xdrs, &tmp)) {
				*(int *)fp = tmp;
				return (1);
			}
		}
		break;

	case XDR_FREE:
		return (1);
	}
	return (0);
}


static int
xdr_double(XDR *xdrs, double *dp)
{
    /* Gromacs detects floating-point stuff at compile time, which is faster */
#ifdef GROMACS
#  ifndef FLOAT_FORMAT_IEEE754
#    error non-IEEE floating point system, or you defined GROMACS yourself...
#  endif
    int LSW;
#  ifdef IEEE754_BIG_ENDIAN_WORD_ORDER
    int LSW=1;
#  else
    int LSW=0;
#  endif /* Big endian word order */
#else
    /* Outside Gromacs we rely on dynamic detection of FP order. */
    int LSW; /* Least significant fp word */

    double x=0.987654321; /* Just a number */
    unsigned char ix = *((char *)&x);

    /* Possible representations in IEEE double precision:
     * (S=small endian, B=big endian)
     *
     * Byte order, Word order, Hex
     *     S           S       b8 56 0e 3c dd 9a ef 3f
     *     B           S       3c 0e 56 b8 3f ef 9a dd
     *     S           B       dd 9a ef 3f b8 56 0e 3c
     *     B           B       3f ef 9a dd 3c 0e 56 b8
     */
    if(ix==0xdd || ix==0x3f)
		LSW=1;  /* Big endian word order */
    else if(ix==0xb8 || ix==0x3c)
		LSW=0;  /* Small endian word order */
    else { /* Catch strange errors */
		fprintf(stderr,"Cannot detect floating-point word order.\n"
				"Do you have a non-IEEE system?\n"
				"Use system XDR libraries or fix xdr_double().\n");
		abort();
    }
#endif /* end of dynamic detection of fp word order */

	switch (xdrs->x_op) {

	case XDR_ENCODE:
		if (2*sizeof(int32_t) == sizeof(double)) {
			int32_t *lp = (int32_t *)dp;
			return (xdr_putlong(xdrs, lp+!LSW) &&
					xdr_putlong(xdrs, lp+LSW));
		} else if (2*sizeof(int) == sizeof(double)) {
			int *ip = (int *)dp;
			int32_t tmp[2];
			tmp[0] = ip[!LSW];
			tmp[1] = ip[LSW];
			return (xdr_putlong(xdrs, tmp) &&
					xdr_putlong(xdrs, tmp+1));
		}
		break;

	case XDR_DECODE:
		if (2*sizeof(int32_t) == sizeof(double)) {
			int32_t *lp = (int32_t *)dp;
			return (xdr_getlong(xdrs, lp+!LSW) &&
					xdr_getlong(xdrs, lp+LSW));
		} else if (2*sizeof(int) == sizeof(double)) {
			int *ip = (int *)dp;
			int32_t tmp[2];
			if (xdr_getlong(xdrs, tmp+!LSW) &&
				xdr_getlong(xdrs, tmp+LSW)) {
				ip[0] = tmp[0];
				ip[1] = tmp[1];
				return (1);
			}
		}
		break;

	case XDR_FREE:
		return (1);
	}
	return (0);
}


static int xdrstdio_getlong (XDR *, int32_t *);
static int xdrstdio_putlong (XDR *, int32_t *);
static int xdrstdio_getbytes (XDR *, char *, unsigned int);
static int xdrstdio_putbytes (XDR *, char *, unsigned int);
static int64_t xdrstdio_getpos (XDR *);
static int xdrstdio_setpos (XDR *, int64_t, int);
static void xdrstdio_destroy (XDR *);

/*
 * Ops vector for stdio type XDR
 */
static const struct xdr_ops xdrstdio_ops =
	{
		xdrstdio_getlong,		/* deserialize a long int */
		xdrstdio_putlong,		/* serialize a long int */
		xdrstdio_getbytes,       	/* deserialize counted bytes */
		xdrstdio_putbytes,     	/* serialize counted bytes */
		xdrstdio_getpos,		/* get offset in the stream */
		xdrstdio_setpos,		/* set offset in the stream */
		xdrstdio_destroy,		/* destroy stream */
	};

/*
 * Initialize a stdio xdr stream.
 * Sets the xdr stream handle xdrs for use on the stream file.
 * Operation flag is set to op.
 */
static void
xdrstdio_create (XDR *xdrs, FILE *file, enum xdr_op op)
{
	xdrs->x_op = op;

	xdrs->x_ops = (struct xdr_ops *) &xdrstdio_ops;
	xdrs->x_private = (char *) file;
}

/*
 * Destroy a stdio xdr stream.
 * Cleans up the xdr stream handle xdrs previously set up by xdrstdio_create.
 */
static void
xdrstdio_destroy (XDR *xdrs)
{
	(void) fflush ((FILE *) xdrs->x_private);
	/* xx should we close the file ?? */
}

static int
xdrstdio_getlong (XDR *xdrs, int32_t *lp)
{
	int32_t mycopy;

	if (fread ((char *) & mycopy, 4, 1, (FILE *) xdrs->x_private) != 1)
		return 0;
	*lp = (int32_t) xdr_ntohl (mycopy);
	return 1;
}

static int
xdrstdio_putlong (XDR *xdrs, int32_t *lp)
{
	int32_t mycopy = xdr_htonl (*lp);
	lp = &mycopy;
	if (fwrite ((char *) lp, 4, 1, (FILE *) xdrs->x_private) != 1)
		return 0;
	return 1;
}

static int
xdrstdio_getbytes (XDR *xdrs, char *addr, unsigned int len)
{
	if ((len != 0) && (fread (addr, (int) len, 1,
							  (FILE *) xdrs->x_private) != 1))
		return 0;
	return 1;
}

static int
xdrstdio_putbytes (XDR *xdrs, char *addr, unsigned int len)
{
	if ((len != 0) && (fwrite (addr, (int) len, 1,
							   (FILE *) xdrs->x_private) != 1))
		return 0;
	return 1;
}


static int64_t
xdrstdio_getpos (XDR *xdrs)
{
    #ifdef _WIN32
    return _ftelli64((FILE *) xdrs->x_private);
    #else /* __unix__ */
    return ftello((FILE *) xdrs->x_private);
    #endif
}

static int
xdrstdio_setpos (XDR *xdrs, int64_t pos, int whence)
{
    /* A reason for failure can be filesystem limits on allocation units,
     * before the actual off_t overflow (ext3, with a 4K clustersize,
     * has a 16TB limit).*/
    /* We return errno relying on the fact that it is never set to 0 on
     * success, which means that if an error occurrs it'll never be the same
     * as exdrOK, and xdr_seek won't be confused.*/
    #ifdef _WIN32
	return _fseeki64((FILE *) xdrs->x_private, pos, whence) < 0 ? errno : exdrOK;
    #else /*  __unix__ */
	return fseeko((FILE *) xdrs->x_private, pos, whence) < 0 ? errno : exdrOK;
    #endif


}


int64_t xdr_tell(XDRFILE *xd)
/* Reads position in file */
{
    return (int64_t)xdrstdio_getpos(xd->xdr);
}

int xdr_seek(XDRFILE *xd, int64_t pos, int whence)
/* Seeks to position in file */
{
    int result;
    if ((result = xdrstdio_setpos(xd->xdr, (int64_t) pos, whence)) != 0)
        return result;

    return exdrOK;
}


#endif /* HAVE_RPC_XDR_H not defined */
