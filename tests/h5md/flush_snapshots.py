"""Run under gdb (``gdb -batch -x flush_snapshots.py --args python ...``): at every ``H5FD_truncate`` - the
end of an HDF5 flush, after the superblock is written and before the file is extended to the size it
records - copy the file named by ``$SNAPSHOT_OF`` into ``$SNAPSHOT_DIR``. Each copy is the file a process
killed at that moment leaves (what it wrote is in the page cache, which a SIGKILL does not lose)."""

import os
import shutil

import gdb

SOURCE, OUT = os.environ["SNAPSHOT_OF"], os.environ["SNAPSHOT_DIR"]


class Snapshot(gdb.Breakpoint):
    taken = 0

    def stop(self) -> bool:
        if os.path.exists(SOURCE):
            shutil.copyfile(SOURCE, os.path.join(OUT, f"{Snapshot.taken:04d}.h5"))
            Snapshot.taken += 1
        return False   # go on


gdb.execute("set pagination off")
gdb.execute("set confirm off")
gdb.execute("set breakpoint pending on")
Snapshot("H5FD_truncate")
gdb.execute("run")
print(f"snapshots: {Snapshot.taken}")
