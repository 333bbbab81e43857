"""An IMD producer for the streaming tests: imdclient's own test server streaming PSF/DCD (MDAnalysisTests).

In a test's process (:class:`PatientServer`), or as a process of its own that a test can kill:
``python -m tests.sources.imd_producer VERSION N_FRAMES [die|reset]`` prints its port, streams the first N_FRAMES
frames once a client connects and ends the stream; with ``die`` it then sends half of the next frame and is
killed (SIGKILL), as an engine that crashes mid-run; with ``reset``, once the client has had time to read the
frames, it resets the connection (a TCP RST, as a crashed node's network does).
"""

from __future__ import annotations

import os
import select
import signal
import socket
import struct
import sys
import time
import warnings

from imdclient.IMDClient import IMDSessionInfo
from imdclient.IMDProtocol import IMDHeaderType, create_header_bytes
from imdclient.tests.server import InThreadIMDServer


class PatientServer(InThreadIMDServer):
    """imdclient's test server, waiting for the client as long as a loaded machine takes to start one
    (it waits 5 s, shorter than the command's start here)."""

    def _accept_handshake(self, first_frame):
        select.select([self.listen_socket], [], [], 300)
        super()._accept_handshake(first_frame)


def session(version: int) -> IMDSessionInfo:
    """What the server says it sends: the DCD has no box, velocities nor forces."""
    return IMDSessionInfo(version=version, endianness="<", time=version == 3, energies=True, box=False,
                          positions=True, velocities=False, forces=False, wrapped_coords=False)


def main(version: int, n_frames: int, end: str) -> None:
    import MDAnalysis as mda
    import numpy as np
    from MDAnalysisTests.datafiles import DCD, PSF

    warnings.filterwarnings("ignore")
    u = mda.Universe(PSF, DCD)
    server = PatientServer(u.trajectory)
    server.set_imdsessioninfo(session(version))
    server.handshake_sequence("localhost", first_frame=False)
    print(server.port, flush=True)
    server.join_accept_thread()
    server.send_frames(0, n_frames)
    if end == "die":
        positions = np.ascontiguousarray(u.trajectory[n_frames].positions, dtype="<f").tobytes()
        server.conn.sendall(create_header_bytes(IMDHeaderType.IMD_FCOORDS, u.atoms.n_atoms)
                            + positions[:len(positions) // 2])
        os.kill(os.getpid(), signal.SIGKILL)
    if end == "reset":
        time.sleep(2)   # the client reads every frame sent (within imdclient's 5 s read timeout)
        server.conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        server.conn.close()   # with a zero linger: a reset, not an end of stream
        return
    server.disconnect()
    server.cleanup()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "")
