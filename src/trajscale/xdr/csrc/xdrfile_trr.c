/* -*- mode: c; tab-width: 4; indent-tabs-mode: t; c-basic-offset: 4 -*-
 *
 * Copyright (c) 2009-2014, Erik Lindahl & David van der Spoel
 * All rights reserved.
 *
 * Redistribution and use in source and binary forms, with or without
 * modification, are permitted provided that the following conditions are met:
 *
 * 1. Redistributions of source code must retain the above copyright notice,
 this
 * list of conditions and the following disclaimer.
 *
 * 2. Redistributions in binary form must reproduce the above copyright notice,
 * this list of conditions and the following disclaimer in the documentation
 * and/or other materials provided with the distribution.
 *
 * THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS "AS IS"
 * AND ANY EXPRESS OR IMPLIED WARRANTIES, INCLUDING, BUT NOT LIMITED TO, THE
 * IMPLIED WARRANTIES OF MERCHANTABILITY AND FITNESS FOR A PARTICULAR PURPOSE
 ARE
 * DISCLAIMED. IN NO EVENT SHALL THE COPYRIGHT HOLDER OR CONTRIBUTORS BE LIABLE
 * FOR ANY DIRECT, INDIRECT, INCIDENTAL, SPECIAL, EXEMPLARY, OR CONSEQUENTIAL
 * DAMAGES (INCLUDING, BUT NOT LIMITED TO, PROCUREMENT OF SUBSTITUTE GOODS OR
 * SERVICES; LOSS OF USE, DATA, OR PROFITS; OR BUSINESS INTERRUPTION) HOWEVER
 * CAUSED AND ON ANY THEORY OF LIABILITY, WHETHER IN CONTRACT, STRICT LIABILITY,
 * OR TORT (INCLUDING NEGLIGENCE OR OTHERWISE) ARISING IN ANY WAY OUT OF THE USE
 * OF THIS SOFTWARE, EVEN IF ADVISED OF THE POSSIBILITY OF SUCH DAMAGE.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "xdrfile.h"
#include "xdrfile_trr.h"

#define BUFSIZE 128
#define GROMACS_MAGIC 1993

static int nFloatSize(t_trnheader *sh, int *nflsz) {
  int nflsize = 0;

  /* trajscale: natoms is checked before it divides (0 raised SIGFPE; a negative or huge one
   * overflowed natoms * DIM) */
  if (sh->natoms <= 0 || sh->natoms > INT_MAX / (DIM * 8)) {
    if (sh->box_size == 0)
      return exdrHEADER;
  }
  if (sh->box_size)
    nflsize = sh->box_size / (DIM * DIM);
  else if (sh->x_size)
    nflsize = sh->x_size / (sh->natoms * DIM);
  else if (sh->v_size)
    nflsize = sh->v_size / (sh->natoms * DIM);
  else if (sh->f_size)
    nflsize = sh->f_size / (sh->natoms * DIM);
  else
    return exdrHEADER;

  if (((nflsize != sizeof(float)) && (nflsize != sizeof(double))))
    return exdrHEADER;

  *nflsz = nflsize;

  return exdrOK;
}

/* trajscale: the first field of a TRR frame header that disagrees with the others, or NULL. */
const char *trr_header_problem(const t_trnheader *sh, int nflsz) {
  long long block = (long long)nflsz * DIM * DIM;
  long long atoms = (long long)nflsz * DIM * sh->natoms;
  if (sh->natoms < 0 || sh->natoms > INT_MAX / (DIM * 8))
    return "natoms";
  /* each size: 0 (absent) or the one its kind and the precision give; the first to differ is named */
#define MUST_BE(field, want) if (sh->field != 0 && sh->field != (want)) return #field
  MUST_BE(ir_size, 0);
  MUST_BE(e_size, 0);
  MUST_BE(top_size, 0);
  MUST_BE(sym_size, 0);
  MUST_BE(box_size, block);
  MUST_BE(vir_size, block);
  MUST_BE(pres_size, block);
  MUST_BE(x_size, atoms);
  MUST_BE(v_size, atoms);
  MUST_BE(f_size, atoms);
#undef MUST_BE
  /* atoms with no coordinates, velocities or forces: nothing in the file bounds their count */
  if (sh->natoms > 0 && sh->x_size == 0 && sh->v_size == 0 && sh->f_size == 0)
    return "natoms (a frame of atoms without x, v or f)";
  return NULL;
}

/* trajscale: one real of the frame's precision (a float read is exact as a double) */
static int read_real(XDRFILE *xd, int bDouble, double *out) {
  float f;
  if (bDouble)
    return xdrfile_read_double(out, 1, xd) == 1 ? exdrOK : exdrDOUBLE;
  if (xdrfile_read_float(&f, 1, xd) != 1)
    return exdrFLOAT;
  *out = f;
  return exdrOK;
}

int do_trnheader(XDRFILE *xd, mybool bRead, t_trnheader *sh) {
  int magic = GROMACS_MAGIC;
  int nflsz, slen, result;
  char *version = "GMX_trn_file";
  char buf[BUFSIZE];

  if (xdrfile_read_int(&magic, 1, xd) != 1)
    return exdrINT;

  /* trajscale: reads only (bRead is always true here) */
  if (xdrfile_read_int(&slen, 1, xd) != 1)
    return exdrINT;
  if (slen != strlen(version) + 1)
    return exdrSTRING;
  if (xdrfile_read_string(buf, BUFSIZE, xd) <= 0)
    return exdrSTRING;
  if (xdrfile_read_int(&sh->ir_size, 1, xd) != 1)
    return exdrINT;
  if (xdrfile_read_int(&sh->e_size, 1, xd) != 1)
    return exdrINT;
  if (xdrfile_read_int(&sh->box_size, 1, xd) != 1)
    return exdrINT;
  if (xdrfile_read_int(&sh->vir_size, 1, xd) != 1)
    return exdrINT;
  if (xdrfile_read_int(&sh->pres_size, 1, xd) != 1)
    return exdrINT;
  if (xdrfile_read_int(&sh->top_size, 1, xd) != 1)
    return exdrINT;
  if (xdrfile_read_int(&sh->sym_size, 1, xd) != 1)
    return exdrINT;
  if (xdrfile_read_int(&sh->x_size, 1, xd) != 1)
    return exdrINT;
  if (xdrfile_read_int(&sh->v_size, 1, xd) != 1)
    return exdrINT;
  if (xdrfile_read_int(&sh->f_size, 1, xd) != 1)
    return exdrINT;
  if (xdrfile_read_int(&sh->natoms, 1, xd) != 1)
    return exdrINT;

  sh->bad = NULL;
  if ((result = nFloatSize(sh, &nflsz)) != exdrOK) {
    sh->bad = (sh->natoms < 0 || sh->natoms > INT_MAX / (DIM * 8)) ? "natoms"
              : "box_size, x_size, v_size or f_size (neither float nor double reals)";
    return result;
  }
  sh->bDouble = (nflsz == sizeof(double));
  /* trajscale: every block size is checked against the atom count and the precision before the
   * frame is read: do_htrn reads natoms atoms for any non-zero x/v/f size and skips nothing for the
   * other blocks, so a size that disagrees would read the wrong bytes or into the wrong buffer. */
  if (bRead && (sh->bad = trr_header_problem(sh, nflsz)) != NULL)
    return exdrHEADER;

  if (xdrfile_read_int(&sh->step, 1, xd) != 1)
    return exdrINT;
  if (xdrfile_read_int(&sh->nre, 1, xd) != 1)
    return exdrINT;
  /* trajscale: time and lambda in the frame's precision, through one routine */
  if ((result = read_real(xd, sh->bDouble, &sh->td)) != exdrOK)
    return result;
  if ((result = read_real(xd, sh->bDouble, &sh->lambdad)) != exdrOK)
    return result;
  sh->tf = sh->td;
  sh->lambdaf = sh->lambdad;
  return exdrOK;
}

/* trajscale: reads only. n reals of the frame (doubles or floats, as its header says) into dst as floats,
 * or read and dropped where dst is NULL; buf holds n of them. One routine for the box, the virial, the
 * pressure and each per-atom field, in place of xdrfile's copy of each for both precisions and both
 * directions. */
static int read_reals(XDRFILE *xd, int bDouble, int n, float *dst, void *buf) {
  const double *d = (const double *)buf;
  const float *f = (const float *)buf;
  int i;
  if (bDouble ? xdrfile_read_double((double *)buf, n, xd) != n : xdrfile_read_float((float *)buf, n, xd) != n)
    return bDouble ? exdrDOUBLE : exdrFLOAT;
  if (NULL != dst)
    for (i = 0; i < n; i++)
      dst[i] = bDouble ? (float)d[i] : f[i];
  return exdrOK;
}

/* The frame's data after its header sh: box, virial, pressure, then x, v and f where present. */
static int read_htrn(XDRFILE *xd, t_trnheader *sh, matrix box, rvec *x, rvec *v, rvec *f) {
  int n = sh->natoms * DIM, rc = exdrOK;
  int per_atom = (sh->x_size != 0) || (sh->v_size != 0) || (sh->f_size != 0);
  void *buf = malloc((per_atom && n > DIM * DIM ? n : DIM * DIM) * sizeof(double));

  if (NULL == buf)
    return exdrNOMEM;
  if (sh->box_size != 0)
    rc = read_reals(xd, sh->bDouble, DIM * DIM, NULL != box ? box[0] : NULL, buf);
  if (rc == exdrOK && sh->vir_size != 0)
    rc = read_reals(xd, sh->bDouble, DIM * DIM, NULL, buf);
  if (rc == exdrOK && sh->pres_size != 0)
    rc = read_reals(xd, sh->bDouble, DIM * DIM, NULL, buf);
  if (rc == exdrOK && sh->x_size != 0)
    rc = read_reals(xd, sh->bDouble, n, NULL != x ? x[0] : NULL, buf);
  if (rc == exdrOK && sh->v_size != 0)
    rc = read_reals(xd, sh->bDouble, n, NULL != v ? v[0] : NULL, buf);
  if (rc == exdrOK && sh->f_size != 0)
    rc = read_reals(xd, sh->bDouble, n, NULL != f ? f[0] : NULL, buf);
  free(buf);
  return rc;
}

/************************************************************
 *
 *  The following routines are the exported ones
 *
 ************************************************************/

int read_trr(XDRFILE *xd, int natoms, int *step, float *t, float *lambda,
             matrix box, rvec *x, rvec *v, rvec *f, int *has_prop) {
  t_trnheader sh;
  int result;

  /* trajscale: on the stack: the calloc'd header leaked on every error return */
  memset(&sh, 0, sizeof(sh));
  if ((result = do_trnheader(xd, 1, &sh)) != exdrOK)
    return result;
  /* trajscale: the caller's buffers hold natoms atoms; a frame with another count is refused, not
   * read into them */
  if (sh.natoms != natoms)
    return exdrHEADER;
  *step = sh.step;
  *t = sh.td;
  *lambda = sh.lambdad;
  /* Flag what we read */
  *has_prop = (sh.x_size > 0 ? HASX : 0) | (sh.v_size > 0 ? HASV : 0) | (sh.f_size > 0 ? HASF : 0);
  return read_htrn(xd, &sh, box, x, v, f);
}
