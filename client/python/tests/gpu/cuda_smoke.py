"""overlapd.torch's CUDA paths on a GPU, without a daemon: alloc() as
exportable cuMem memory that torch reads and writes, the same memory
imported by another process from its POSIX fd (as the daemon does), and the
stream's write and wait of the signal words that order a session's step.

    python3 client/python/tests/gpu/cuda_smoke.py     # needs PyTorch with CUDA

It loads client/python/overlapd/torch.py by path with stand-ins for the
package's gRPC parts, so that it runs where only PyTorch is installed.
Prints one line per check and exits 0 when all pass."""
import ctypes
import importlib.util
import os
import pathlib
import socket
import struct
import sys
import time
import types

HERE = pathlib.Path(__file__).resolve().parent
PACKAGE = HERE.parent.parent / "overlapd"


def load_overlapd_torch():
    """overlapd.torch with stand-ins for what it imports from the package."""
    package = types.ModuleType("overlapd")
    package.__path__ = []
    client = types.ModuleType("overlapd.client")
    client.Graph = object
    errors = types.ModuleType("overlapd.errors")
    errors.InvalidArgumentError = ValueError
    session = types.ModuleType("overlapd.session")
    session.SIGNAL_INPUTS_READY, session.SIGNAL_OUTPUTS_READY = 0, 8
    session.CommandTimes = session.Session = session.TensorKind = object
    for name, module in (("overlapd", package), ("overlapd.client", client),
                         ("overlapd.errors", errors), ("overlapd.session", session)):
        sys.modules[name] = module
    spec = importlib.util.spec_from_file_location("overlapd.torch", PACKAGE / "torch.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["overlapd.torch"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def child(sock_fd, nbytes, device):
    """Imports the fd it is sent, maps it, copies it to the host, sends back its sum."""
    sock = socket.socket(fileno=sock_fd)
    _, ancillary, _, _ = sock.recvmsg(1, socket.CMSG_SPACE(4))
    fd = struct.unpack("i", ancillary[0][2][:4])[0]
    cuda = ctypes.CDLL("libcuda.so.1")
    assert cuda.cuInit(0) == 0
    dev = ctypes.c_int()
    assert cuda.cuDeviceGet(ctypes.byref(dev), device) == 0
    ctx = ctypes.c_void_p()
    assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
    assert cuda.cuCtxSetCurrent(ctx) == 0
    handle = ctypes.c_ulonglong()
    rc = cuda.cuMemImportFromShareableHandle(ctypes.byref(handle), ctypes.c_void_p(fd), 1)
    assert rc == 0, "cuMemImportFromShareableHandle: %d" % rc
    size = nbytes
    ptr = ctypes.c_ulonglong()
    assert cuda.cuMemAddressReserve(ctypes.byref(ptr), ctypes.c_size_t(size), ctypes.c_size_t(0),
                                    ctypes.c_ulonglong(0), ctypes.c_ulonglong(0)) == 0
    assert cuda.cuMemMap(ptr, ctypes.c_size_t(size), ctypes.c_size_t(0), handle,
                         ctypes.c_ulonglong(0)) == 0

    class Loc(ctypes.Structure):
        _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]

    class Access(ctypes.Structure):
        _fields_ = [("location", Loc), ("flags", ctypes.c_int)]

    access = Access(Loc(1, device), 3)
    assert cuda.cuMemSetAccess(ptr, ctypes.c_size_t(size), ctypes.byref(access),
                               ctypes.c_size_t(1)) == 0
    host = (ctypes.c_float * 256)()
    assert cuda.cuMemcpyDtoH_v2(host, ptr, ctypes.c_size_t(1024)) == 0
    sock.sendall(struct.pack("<d", sum(host)))


def main():
    import torch

    if not torch.cuda.is_available():
        print("SKIP: no CUDA device visible to PyTorch")
        return 0
    otorch = load_overlapd_torch()
    ok = True

    def check(name, cond, detail=""):
        nonlocal ok
        ok = ok and bool(cond)
        print("%s %s %s" % ("PASS" if cond else "FAIL", name, detail))

    host = otorch.alloc((2, 3), "fp32", "cpu")
    host.tensor[1, 2] = 2.5
    import mmap

    view = mmap.mmap(host.fd, mmap.PAGESIZE)
    check("a CPU tensor is memfd memory another mapping sees",
          struct.unpack_from("<f", view, 20)[0] == 2.5 and host.tensor.shape == (2, 3))
    view.close()

    shared = otorch.alloc((16, 16), "fp32", "cuda:0")
    t = shared.tensor
    check("alloc fp32", t.device.type == "cuda" and t.shape == (16, 16) and
          t.dtype == torch.float32 and float(t.abs().sum()) == 0.0)
    t.copy_(torch.arange(256, dtype=torch.float32, device="cuda").view(16, 16))
    check("torch writes and reads it", float(t.sum()) == float(sum(range(256))))
    half = otorch.alloc((8, 8), "bf16", 0)
    half.tensor.fill_(1.5)
    check("alloc bf16 (an int16 view)", half.tensor.dtype == torch.bfloat16 and
          float(half.tensor.float().sum()) == 96.0)
    check("allocation rounded to the granularity", shared.owner.size >= 1024 and shared.fd >= 0,
          "size %d fd %d" % (shared.owner.size, shared.fd))

    # Another process imports the fd and reads what torch wrote.
    import subprocess

    parent_sock, child_sock = socket.socketpair()
    reader = subprocess.Popen([sys.executable, __file__, "--child", str(child_sock.fileno()),
                               str(shared.owner.size)], pass_fds=[child_sock.fileno()])
    child_sock.close()
    torch.cuda.synchronize()
    parent_sock.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                  struct.pack("i", shared.fd))])
    parent_sock.settimeout(60)
    got = parent_sock.recv(8)
    status = reader.wait(timeout=60)
    check("another process imports the fd and reads the data",
          status == 0 and len(got) == 8 and struct.unpack("<d", got)[0] == float(sum(range(256))),
          "status %d" % status)

    # The signal words: a write on one stream, a wait on another.
    signals = otorch.alloc((2,), "int64", "cuda:0")
    driver = otorch.CudaDriver.get()
    base = signals.owner.pointer
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    driver.write_value(s1.cuda_stream, base, 5)
    s1.synchronize()
    check("cuStreamWriteValue64 lands", int(signals.tensor[0]) == 5)
    out = torch.zeros(4, device="cuda")
    driver.wait_value(s2.cuda_stream, base + 8, 7)
    with torch.cuda.stream(s2):
        out.fill_(3.0)
    time.sleep(0.2)
    check("cuStreamWaitValue64 holds the stream back", not s2.query())
    driver.write_value(s1.cuda_stream, base + 8, 7)

    def released(stream, seconds=10.0):
        deadline = time.time() + seconds
        while time.time() < deadline:
            if stream.query():
                return True
            time.sleep(0.01)
        return False

    check("and lets it go once another stream writes the word", released(s2) and
          float(out.sum()) == 12.0 and int(signals.tensor[1]) == 7)
    # The daemon's case: the word written by another process (here: the host).
    s3 = torch.cuda.Stream()
    driver.wait_value(s3.cuda_stream, base + 8, 9)
    with torch.cuda.stream(s3):
        out.fill_(5.0)
    time.sleep(0.2)
    held = not s3.query()
    nine = ctypes.c_ulonglong(9)
    driver.check(driver._lib.cuMemcpyHtoD_v2(ctypes.c_ulonglong(base + 8), ctypes.byref(nine),
                                              ctypes.c_size_t(8)), "cuMemcpyHtoD")
    check("a stream waits for a word the host writes", held and released(s3) and
          float(out.sum()) == 20.0)
    del shared, half, signals, t
    torch.cuda.synchronize()
    check("freed", True)
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(int(sys.argv[2]), int(sys.argv[3]), 0)
        sys.exit(0)
    sys.exit(main())
