"""The client measurement behind docs/remote.md: 1,000 ranges of 60 kB from one object on a local S3 server.

Run: ``python benchmarks/remote_clients.py [MiB [RANGES]]`` (default 4 MiB, 1,000 ranges; the test suite's
smoke run: ``1 50``): moto's server in its own process on
127.0.0.1, the object uploaded, then fsspec/s3fs ``cat_ranges``, obstore with one request per range
(as trajscale's checked requests go out), and obstore's ``get_ranges`` (which merges nearby ranges),
each timed (wall and this process's CPU).
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import time


def main(mib: int = 4, ranges: int = 1000) -> None:
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = (f"import time; from moto.server import ThreadedMotoServer as T; T(ip_address='127.0.0.1', port={port})"
            ".start(); time.sleep(3600)")
    server = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _measure(f"http://127.0.0.1:{port}", port, mib, ranges)
    finally:
        server.kill()


def _measure(endpoint: str, port: int, mib: int, ranges: int) -> None:
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    import boto3
    import obstore
    import s3fs
    from obstore.store import S3Store

    from trajscale.storage.objects import RemoteObject

    size = mib * 1024 * 1024
    client = boto3.client("s3", endpoint_url=endpoint)
    client.create_bucket(Bucket="bench")
    client.put_object(Bucket="bench", Key="obj", Body=os.urandom(size))
    rng = random.Random(0)
    starts = sorted(rng.randrange(0, size - 60_000) for _ in range(ranges))
    ends = [a + 60_000 for a in starts]

    def timed(name, fn):
        t, c = time.perf_counter(), time.process_time()
        fn()
        print(f"{name:<45} {time.perf_counter() - t:7.2f} s wall {time.process_time() - c:6.2f} s CPU")

    fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": endpoint})
    timed("fsspec/s3fs cat_ranges", lambda: fs.cat_ranges(["bench/obj"] * ranges, starts, ends))
    obj = RemoteObject.open("s3://bench/obj", {"endpoint_url": endpoint})
    timed("obstore, one checked request per range", lambda: obj.read_ranges(list(zip(starts, ends, strict=True))))
    store = S3Store("bench", endpoint=endpoint, allow_http=True, region="us-east-1")
    timed("obstore get_ranges (merges nearby ranges)", lambda: obstore.get_ranges(store, "obj", starts=starts,
                                                                                   ends=ends))


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
