/* Preloaded into the processes the test suite starts (tests/conftest.py): an idle MPI rank gives up its core.
 *
 * MPICH 4.0's ch4:ucx device waits for a message by calling ucp_worker_progress in a loop that never yields
 * (later MPICH adds a progress throttle for this, MPIR_CVAR_CH4_PROGRESS_THROTTLE). The suite runs 8 and 16
 * ranks on 2 cores beside other tests, where each waiting rank spun a whole time slice before the rank it
 * waits for could run: 8 ranks writing AdK took 21 s (42 s of CPU) instead of 2.5 s. Here a rank whose polls
 * find nothing yields, and after a run of empty polls sleeps 20 us per poll; a poll that finds work resets the
 * count. What MPI computes and in which order is unchanged: only when an idle rank runs.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>

typedef unsigned (*progress_fn)(void *);

/* UCX's own function: after this library in the global scope, or, where libucp came in with a library loaded
 * locally (h5py's MPI-enabled HDF5 before mpi4py), from libucp itself, already loaded by its caller. */
static progress_fn real_progress(void)
{
    void *f = dlsym(RTLD_NEXT, "ucp_worker_progress");
    if (!f) {
        void *ucp = dlopen("libucp.so.0", RTLD_NOW | RTLD_NOLOAD);
        f = ucp ? dlsym(ucp, "ucp_worker_progress") : NULL;
    }
    return (progress_fn)f;
}

unsigned ucp_worker_progress(void *worker)
{
    static progress_fn real;
    static unsigned empty;
    if (!real && !(real = real_progress()))
        abort();   /* preloaded into a process whose UCX cannot be found: fail loudly, never hang */
    unsigned done = real(worker);
    if (done) {
        empty = 0;
    } else if (++empty > 64) {
        struct timespec nap = {0, 20000};
        nanosleep(&nap, NULL);
    } else {
        sched_yield();
    }
    return done;
}
