"""overlapd.torch: importable without PyTorch (a clear error when used), and
where PyTorch is installed its CPU paths: memfd-backed tensors the daemon
maps, and a session's steps on them (against a fake daemon)."""
import importlib.util
import os
import tempfile

import pytest

import overlapd.torch as otorch

HAVE_TORCH = importlib.util.find_spec("torch") is not None


@pytest.mark.skipif(HAVE_TORCH, reason="PyTorch is installed here")
def test_without_torch_it_imports_and_says_what_is_missing():
    with pytest.raises(otorch.TorchMissingError) as missing:
        otorch.alloc((2, 2), "fp32")
    assert isinstance(missing.value, ImportError)
    assert "needs PyTorch" in str(missing.value)
    with pytest.raises(otorch.TorchMissingError):
        otorch.open_session({"ops": []}, "g", 0, socket="/nonexistent")


@pytest.mark.skipif(not HAVE_TORCH, reason="PyTorch is not installed")
def test_a_cpu_tensor_is_memfd_memory_both_mappings_see():
    import mmap
    import struct

    import torch

    shared = otorch.alloc((2, 3), "fp32", "cpu")
    assert shared.tensor.shape == (2, 3) and shared.tensor.dtype == torch.float32
    assert shared.nbytes == 24
    shared.tensor[1, 2] = 2.5
    other = mmap.mmap(shared.fd, mmap.PAGESIZE)
    assert struct.unpack_from("<f", other, 20)[0] == 2.5
    other.close()


@pytest.mark.skipif(not HAVE_TORCH, reason="PyTorch is not installed")
def test_a_cpu_session_runs_steps_on_torch_tensors():
    from test_session_fake import FakeDaemon, GRAPH

    path = os.path.join(tempfile.mkdtemp(prefix="overlapd-torch-"), "s.sock")
    fake = FakeDaemon(path)
    with otorch.open_session(GRAPH, "mlp", 1, socket=path) as s:
        assert not s.on_cuda
        assert tuple(s.tensor("fc1", "x").shape) == (4, 8)
        s.start()
        handle = s.run("fc1")
        times = handle.synchronize(timeout=10)
        assert times.seq == 1 and times.enqueue_us == 5.0
    assert fake.inputs_ready_seen == [1]
