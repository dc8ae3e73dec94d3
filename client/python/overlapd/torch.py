"""overlapd.torch: a session per process group for PyTorch (docs/SESSIONS.md).

Each rank of a tensor-parallel group opens the same session, gets its
tensors in memory the daemon can map, fills them as its model does, and asks
for the graph's ops on its own stream:

    import torch, overlapd.torch as otorch
    s = otorch.open_session(graph, "mlp-tp", rank, socket=path)  # allocates every need
    s.tensor("fc1", "w").copy_(my_fc1_weight_shard)
    s.start()                                                  # every rank has joined
    s.tensor("fc1", "x").copy_(hidden_states)
    handle = s.run("fc1", stream=torch.cuda.current_stream())  # returns once posted
    out = s.tensor("fc2", "y")      # later kernels on that stream see the outputs
    handle.synchronize()            # or stream.synchronize()

Where the memory comes from:
- CUDA: `alloc()` makes an exportable allocation with the driver's virtual
  memory API through ctypes on libcuda (cuMemCreate with a POSIX file
  descriptor handle, cuMemExportToShareableHandle, cuMemAddressReserve,
  cuMemMap, cuMemSetAccess) and wraps it as a torch tensor through
  __cuda_array_interface__ (16-bit and fp8 types as int views of the same
  memory). The fd goes to the daemon over the session socket.
- CPU (the daemon's host backend): a memfd, mapped, as a tensor
  (torch.frombuffer on the mapping).

How a step is ordered without the host waiting on a GPU: on CUDA, `run`
enqueues on the caller's stream a write of the command's number to the
rank's inputs-ready word (cuStreamWriteValue64, after the kernels that made
the inputs), posts the command on the ring, and enqueues a wait for the
outputs-ready word (cuStreamWaitValue64 >= that number), so the stream's
later kernels read the outputs once the daemon wrote them; it returns at
once. On CPU it writes the word, posts, and returns a handle whose
synchronize() waits for the daemon.

What has run where: the CPU paths run in CI against a real daemon on the host
backend (client/python/tests/test_torch_cpu.py skips where PyTorch is not
installed). The CUDA paths (alloc, the stream write and wait) are written to
the CUDA 12/13 driver API and have not run on a GPU in this package's tests.

PyTorch is imported only when used: this module imports without it, and any
call that needs it raises TorchMissingError saying so."""
import ctypes
import dataclasses
import importlib
import mmap
import os
from typing import Any, Dict, Optional, Sequence, Tuple, Union

from overlapd.client import Graph
from overlapd.errors import InvalidArgumentError
from overlapd.session import (SIGNAL_INPUTS_READY, SIGNAL_OUTPUTS_READY, CommandTimes, Session,
                              TensorKind)

# The daemon's dtype names (TensorNeed.dtype) and torch's.
_TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16",
                 "fp8": "float8_e4m3fn"}
# How __cuda_array_interface__ names the memory of each (types it lacks go as
# ints of the same width, viewed back).
_INTERFACE_TYPES = {"float32": ("<f4", None), "float16": ("<f2", None),
                    "bfloat16": ("<i2", "bfloat16"), "float8_e4m3fn": ("|u1", "float8_e4m3fn"),
                    "int64": ("<i8", None), "uint8": ("|u1", None)}


class TorchMissingError(ImportError):
    """overlapd.torch was used where PyTorch is not installed."""


def _torch() -> Any:
    try:
        torch = importlib.import_module("torch")
    except ImportError as e:
        raise TorchMissingError(
            "overlapd.torch needs PyTorch, which is not installed here (pip install torch); "
            "overlapd.session works without it (%s)" % e) from None
    return torch


def torch_dtype(name: str) -> Any:
    """The torch dtype of a daemon dtype name ("fp32", "bf16", ...) or a torch one."""
    torch = _torch()
    attr = _TORCH_DTYPES.get(name, name)
    dtype = getattr(torch, attr, None)
    if dtype is None:
        raise InvalidArgumentError("dtype %r: no such torch dtype" % name)
    return dtype


# --- the CUDA driver through ctypes ----------------------------------------

class _MemLocation(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _MemAllocationProp(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int),
                ("location", _MemLocation), ("win32HandleMetaData", ctypes.c_void_p),
                ("allocFlags", _AllocFlags)]


class _MemAccessDesc(ctypes.Structure):
    _fields_ = [("location", _MemLocation), ("flags", ctypes.c_int)]


_CU_MEM_ALLOCATION_TYPE_PINNED = 1
_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1
_CU_MEM_LOCATION_TYPE_DEVICE = 1
_CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
_CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1
_CU_STREAM_WAIT_VALUE_GEQ = 0
_CU_STREAM_WRITE_VALUE_DEFAULT = 0


class CudaDriver:
    """The few driver calls a session needs, from libcuda.so.1 (no toolkit
    needed). Each failure raises OSError naming the call and the driver's error."""

    _loaded: Optional["CudaDriver"] = None

    def __init__(self) -> None:
        try:
            self._lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise OSError("overlapd.torch: cannot load the CUDA driver (libcuda.so.1): %s" % e)
        self._write64 = self._first("cuStreamWriteValue64_v2", "cuStreamWriteValue64")
        self._wait64 = self._first("cuStreamWaitValue64_v2", "cuStreamWaitValue64")

    @classmethod
    def get(cls) -> "CudaDriver":
        if cls._loaded is None:
            cls._loaded = CudaDriver()
        return cls._loaded

    def _first(self, *names: str) -> Any:
        for name in names:
            if hasattr(self._lib, name):
                return getattr(self._lib, name)
        raise OSError("overlapd.torch: the CUDA driver has none of %s" % ", ".join(names))

    def check(self, result: int, call: str) -> None:
        if result == 0:
            return
        text = ctypes.c_char_p()
        self._lib.cuGetErrorString(result, ctypes.byref(text))
        raise OSError("%s failed: CUDA error %d (%s)"
                      % (call, result, (text.value or b"?").decode()))

    def device_by_pci_bus_id(self, bus_id: str) -> int:
        device = ctypes.c_int()
        self.check(self._lib.cuDeviceGetByPCIBusId(ctypes.byref(device), bus_id.encode()),
                   "cuDeviceGetByPCIBusId(%s)" % bus_id)
        return int(device.value)

    def allocate(self, nbytes: int, device: int) -> Tuple[int, int, int, int]:
        """An exportable allocation of at least nbytes on `device`, mapped
        read-write: (handle, pointer, size, posix fd)."""
        lib = self._lib
        prop = _MemAllocationProp()
        prop.type = _CU_MEM_ALLOCATION_TYPE_PINNED
        prop.requestedHandleTypes = _CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
        prop.location.type = _CU_MEM_LOCATION_TYPE_DEVICE
        prop.location.id = device
        granularity = ctypes.c_size_t()
        self.check(lib.cuMemGetAllocationGranularity(ctypes.byref(granularity), ctypes.byref(prop),
                                                     _CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
                   "cuMemGetAllocationGranularity")
        step = max(int(granularity.value), 1)
        size = -(-max(nbytes, 1) // step) * step
        handle = ctypes.c_ulonglong()
        self.check(lib.cuMemCreate(ctypes.byref(handle), ctypes.c_size_t(size), ctypes.byref(prop),
                                   ctypes.c_ulonglong(0)), "cuMemCreate(%d bytes)" % size)
        pointer = ctypes.c_ulonglong()
        fd = ctypes.c_int(-1)
        try:
            self.check(lib.cuMemExportToShareableHandle(
                ctypes.byref(fd), handle, _CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                ctypes.c_ulonglong(0)), "cuMemExportToShareableHandle")
            self.check(lib.cuMemAddressReserve(ctypes.byref(pointer), ctypes.c_size_t(size),
                                               ctypes.c_size_t(step), ctypes.c_ulonglong(0),
                                               ctypes.c_ulonglong(0)), "cuMemAddressReserve")
            self.check(lib.cuMemMap(pointer, ctypes.c_size_t(size), ctypes.c_size_t(0), handle,
                                    ctypes.c_ulonglong(0)), "cuMemMap")
            access = _MemAccessDesc()
            access.location.type = _CU_MEM_LOCATION_TYPE_DEVICE
            access.location.id = device
            access.flags = _CU_MEM_ACCESS_FLAGS_PROT_READWRITE
            self.check(lib.cuMemSetAccess(pointer, ctypes.c_size_t(size), ctypes.byref(access),
                                          ctypes.c_size_t(1)), "cuMemSetAccess")
        except OSError:
            self.free(int(handle.value), int(pointer.value), size, int(fd.value))
            raise
        return int(handle.value), int(pointer.value), size, int(fd.value)

    def free(self, handle: int, pointer: int, size: int, fd: int) -> None:
        """Undoes allocate (each step that happened); never raises."""
        lib = self._lib
        if pointer:
            lib.cuMemUnmap(ctypes.c_ulonglong(pointer), ctypes.c_size_t(size))
            lib.cuMemAddressFree(ctypes.c_ulonglong(pointer), ctypes.c_size_t(size))
        if handle:
            lib.cuMemRelease(ctypes.c_ulonglong(handle))
        if fd >= 0:
            os.close(fd)

    def write_value(self, stream: int, address: int, value: int) -> None:
        self.check(self._write64(ctypes.c_void_p(stream), ctypes.c_ulonglong(address),
                                 ctypes.c_ulonglong(value),
                                 ctypes.c_uint(_CU_STREAM_WRITE_VALUE_DEFAULT)),
                   "cuStreamWriteValue64")

    def wait_value(self, stream: int, address: int, value: int) -> None:
        self.check(self._wait64(ctypes.c_void_p(stream), ctypes.c_ulonglong(address),
                                ctypes.c_ulonglong(value),
                                ctypes.c_uint(_CU_STREAM_WAIT_VALUE_GEQ)), "cuStreamWaitValue64")


class _CudaAllocation:
    """Owns one exportable allocation; torch holds it through the tensor
    (__cuda_array_interface__ keeps its object alive), and the last reference
    gone unmaps and releases it."""

    def __init__(self, shape: Tuple[int, ...], typestr: str, nbytes: int, device: int):
        self._driver = CudaDriver.get()
        self.handle, self.pointer, self.size, self.fd = self._driver.allocate(nbytes, device)
        self.device = device
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr,
                                         "data": (self.pointer, False), "version": 3,
                                         "strides": None}

    def __del__(self) -> None:
        if getattr(self, "handle", 0):
            self._driver.free(self.handle, self.pointer, self.size, self.fd)
            self.handle = 0


class _HostAllocation:
    """A memfd mapped here; torch.frombuffer keeps the mapping alive."""

    def __init__(self, nbytes: int):
        self.size = -(-max(nbytes, 1) // mmap.PAGESIZE) * mmap.PAGESIZE
        self.fd = os.memfd_create("overlapd-torch", os.MFD_CLOEXEC)
        os.ftruncate(self.fd, self.size)
        self.map = mmap.mmap(self.fd, self.size, mmap.MAP_SHARED,
                             mmap.PROT_READ | mmap.PROT_WRITE)

    def __del__(self) -> None:
        if getattr(self, "fd", -1) >= 0:
            os.close(self.fd)
            self.fd = -1


@dataclasses.dataclass
class SharedTensor:
    """A tensor in memory the daemon can map, and what registers it."""

    tensor: Any  # torch.Tensor
    fd: int
    nbytes: int
    owner: Any  # _CudaAllocation or _HostAllocation: keeps the memory


def alloc(shape: Sequence[int], dtype: Any, device: Any = "cpu") -> SharedTensor:
    """A zeroed tensor of `shape` and `dtype` (a torch dtype or a daemon name,
    "bf16") in shareable memory on `device` ("cpu", "cuda", "cuda:1", a
    torch.device or an int). CUDA: an exportable cuMem allocation (its size
    rounded up to the driver's granularity); CPU: a memfd."""
    torch = _torch()
    dt = torch_dtype(dtype) if isinstance(dtype, str) else dtype
    dev = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    shape_t = tuple(int(d) for d in shape)
    count = 1
    for d in shape_t:
        count *= d
    nbytes = count * torch.empty((), dtype=dt).element_size()
    if dev.type == "cpu":
        host = _HostAllocation(nbytes)
        flat = torch.frombuffer(host.map, dtype=dt, count=count) if count else torch.empty(
            0, dtype=dt)
        return SharedTensor(flat.view(shape_t), host.fd, nbytes, host)
    if dev.type != "cuda":
        raise InvalidArgumentError("alloc: device cpu or cuda, not %s" % dev)
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    dev = torch.device("cuda", index)
    name = str(dt).replace("torch.", "")
    if name not in _INTERFACE_TYPES:
        raise InvalidArgumentError("alloc: no shared CUDA tensors of %s" % name)
    typestr, view_as = _INTERFACE_TYPES[name]
    with torch.cuda.device(index):
        torch.empty(0, device=dev)  # the device's primary context, current on this thread
        allocation = _CudaAllocation(shape_t, typestr, nbytes, index)
        tensor = torch.as_tensor(allocation, device=dev)
    if view_as is not None:
        tensor = tensor.view(getattr(torch, view_as))
    tensor.zero_()
    return SharedTensor(tensor, allocation.fd, nbytes, allocation)


# --- sessions ----------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class RunHandle:
    """A command run() posted: synchronize() waits for the daemon to have
    finished it (its times); on CUDA the stream already waits by itself."""

    session: "TorchSession"
    seq: int

    def synchronize(self, timeout: Optional[float] = None) -> CommandTimes:
        return self.session.session.wait(self.seq, timeout=timeout)


class TorchSession:
    """One rank of a session with torch tensors: `tensor(op, kind)` each
    need's tensor, `run(op, stream)` a step, `close()` the end."""

    def __init__(self, session: Session, device: Any):
        self.session = session
        self.device = device
        self._tensors: Dict[Tuple[str, TensorKind], SharedTensor] = {}

    @property
    def on_cuda(self) -> bool:
        return bool(self.session.backend == "cuda")

    def allocate_needs(self) -> None:
        """A tensor for every need not registered yet, registered."""
        for need in self.session.needs:
            if need.key in self._tensors:
                continue
            dtype = "int64" if need.tensor is TensorKind.SIGNALS else need.dtype
            shape = (2,) if need.tensor is TensorKind.SIGNALS else (need.rows, need.cols)
            self.register(need.op, need.tensor, alloc(shape, dtype, self.device))

    def register(self, op: str, tensor: Union[TensorKind, str], shared: SharedTensor) -> None:
        """Registers a tensor alloc() made as `op`'s `tensor` (x, w, y; op ""
        and "signals" for the signal words)."""
        kind = TensorKind.parse(tensor)
        self.session.register(op, kind, shared.fd, 0, shared.nbytes)
        self._tensors[(op, kind)] = shared

    def tensor(self, op: str, kind: Union[TensorKind, str]) -> Any:
        """The torch tensor registered for `op`'s `kind` (rows x cols)."""
        key = (op, TensorKind.parse(kind))
        if key not in self._tensors:
            raise InvalidArgumentError("no tensor %s of %r registered" % (key[1].value, op))
        return self._tensors[key].tensor

    def start(self, timeout: Optional[float] = None) -> None:
        """Every rank has registered: see Session.start."""
        self.session.start(timeout)

    def run(self, op: Union[str, int], stream: Any = None) -> RunHandle:
        """Asks for `op` after what `stream` has enqueued so far (CUDA: the
        caller's stream, default the current one) and returns once posted.
        On CUDA the stream then waits for the outputs by itself."""
        if not self.on_cuda:
            return RunHandle(self, self.session.post(op))
        torch = _torch()
        driver = CudaDriver.get()
        stream = stream if stream is not None else torch.cuda.current_stream(self.device)
        signals = self._tensors.get(("", TensorKind.SIGNALS))
        if signals is None:
            raise InvalidArgumentError("run: register the signal words first (allocate_needs)")
        base = int(signals.owner.pointer)
        seq = self.session.next_seq
        driver.write_value(int(stream.cuda_stream), base + SIGNAL_INPUTS_READY, seq)
        posted = self.session.post(op, signal_inputs=False)
        assert posted == seq
        driver.wait_value(int(stream.cuda_stream), base + SIGNAL_OUTPUTS_READY, seq)
        return RunHandle(self, seq)

    def synchronize(self, timeout: Optional[float] = None) -> None:
        """Waits for every command posted so far."""
        last = self.session.next_seq - 1
        if last > 0:
            self.session.wait(last, timeout=timeout)

    def close(self) -> None:
        """Ends this rank's part of the session. The tensors stay usable as
        memory of this process until dropped."""
        self.session.close()

    def __enter__(self) -> "TorchSession":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_session(graph: Graph, group_name: str, rank: Optional[int] = None,
                 socket: Optional[str] = None, priority: str = "critical",
                 device: Any = None, allocate: bool = True, timeout: float = 30.0,
                 **options: Any) -> TorchSession:
    """Opens rank `rank` (default: torch.distributed's rank, where it is
    initialized) of session `group_name` for `graph`, on the daemon's
    session socket `socket` (default: default_session_socket()). With
    `allocate` every tensor the rank needs is allocated (alloc) and
    registered; fill them through `tensor(op, kind)` and call start().
    `device`: where to allocate (default: "cpu" on the host backend; on CUDA
    the GPU the daemon named by PCI bus id). `options` go to Session.open
    (deferred_bound_ms, join_timeout_s, step_timeout_s, chunk_kib)."""
    torch = _torch()
    if rank is None:
        distributed = getattr(torch, "distributed", None)
        if distributed is None or not distributed.is_initialized():
            raise InvalidArgumentError("open_session: give rank, or initialize torch.distributed")
        rank = int(distributed.get_rank())
    session = Session.open(socket, group_name, graph, rank=rank, priority=priority,
                           timeout=timeout, **options)
    try:
        if device is None:
            if session.backend == "cuda":
                device = torch.device("cuda",
                                      CudaDriver.get().device_by_pci_bus_id(
                                          session.device_pci_bus_id))
            else:
                device = torch.device("cpu")
        result = TorchSession(session, device)
        if allocate:
            result.allocate_needs()
    except BaseException:
        session.close()
        raise
    return result
