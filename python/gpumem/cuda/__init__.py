"""gpumem.cuda: devices, streams, events and graphs with CuPy's names (cupy.cuda).

::

    import gpumem.cuda as cuda

    with cuda.Device(0):
        stream = cuda.Stream(non_blocking=True)
        with stream:                       # the thread's current stream for the block
            start = cuda.Event(); start.record()
            stream.add_callback(lambda s, status, arg: print(arg), "done")
            end = stream.record()
        end.synchronize()
        print(cuda.get_elapsed_time(start, end), "ms")

        stream.begin_capture()             # stream capture into a graph
        stream.add_callback(lambda s, status, arg: None, None)
        graph = stream.end_capture()
        graph.launch(stream)

Callbacks (Stream.add_callback) run on another thread with the GIL held and must not call CUDA or gpumem.

Under the host backend (GPUMEM_BACKEND=host, or no GPU) these describe the emulated devices: streams are
worker-thread queues and events carry timestamps; is_available() is True there too, so use
get_backend() == "cuda" to ask whether a GPU is in use.
"""

from .._gpumem import cuda as _cuda

Device = _cuda.Device
Stream = _cuda.Stream
ExternalStream = _cuda.ExternalStream
Event = _cuda.Event
Graph = _cuda.Graph
get_elapsed_time = _cuda.get_elapsed_time
get_current_stream = _cuda.get_current_stream
get_device_id = _cuda.get_device_id
get_device_count = _cuda.get_device_count
is_available = _cuda.is_available
get_local_runtime_version = _cuda.get_local_runtime_version
get_driver_version = _cuda.get_driver_version
get_backend = _cuda.get_backend

__all__ = [
    "Device",
    "Event",
    "ExternalStream",
    "Graph",
    "Stream",
    "get_backend",
    "get_current_stream",
    "get_device_count",
    "get_device_id",
    "get_driver_version",
    "get_elapsed_time",
    "get_local_runtime_version",
    "is_available",
]
