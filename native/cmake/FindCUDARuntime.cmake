# FindCUDARuntime: the CUDA runtime (cuda_runtime.h and libcudart) without a CUDA compiler. The CUDA family
# has no .cu source: its kernels are cuBLASLt and cuDNN calls the host compiler builds, so the runtime's
# headers and library are all it needs of CUDA. Looked for, in order: a CUDA toolkit (find_package(CUDAToolkit):
# nvcc on PATH, CUDAToolkit_ROOT, /usr/local/cuda), then the runtime pip wheels of the Python on PATH (PyTorch
# installs them: nvidia/cu13 for CUDA 13, nvidia/cuda_runtime for CUDA 12; see NvidiaWheels.cmake), which ship
# only versioned libraries (libcudart.so.13).
#
# Result: CUDARuntime_FOUND, CUDARuntime_VERSION (from CUDART_VERSION), CUDARuntime_SOURCE (toolkit or wheel)
# and the target CUDA::cudart.

find_package(CUDAToolkit QUIET)
if(CUDAToolkit_FOUND AND TARGET CUDA::cudart)
  set(CUDARuntime_SOURCE "CUDA toolkit ${CUDAToolkit_VERSION}")
  set(CUDARUNTIME_INCLUDE_DIR "${CUDAToolkit_INCLUDE_DIRS}")
  set(CUDARUNTIME_LIBRARY "${CUDA_cudart_LIBRARY}")
else()
  set(_cudart_hints ${CUDART_ROOT} $ENV{CUDART_ROOT})
  if(DLBENCH_NVIDIA_WHEEL_DIR)
    list(APPEND _cudart_hints ${DLBENCH_NVIDIA_WHEEL_DIR}/cu13 ${DLBENCH_NVIDIA_WHEEL_DIR}/cuda_runtime)
  endif()
  find_path(CUDARUNTIME_INCLUDE_DIR cuda_runtime.h HINTS ${_cudart_hints} PATH_SUFFIXES include NO_DEFAULT_PATH)
  find_library(CUDARUNTIME_LIBRARY NAMES cudart libcudart.so.13 libcudart.so.12
               HINTS ${_cudart_hints} PATH_SUFFIXES lib lib64 NO_DEFAULT_PATH)
  set(CUDARuntime_SOURCE "the CUDA runtime wheel")
endif()

if(CUDARUNTIME_INCLUDE_DIR)
  list(GET CUDARUNTIME_INCLUDE_DIR 0 _cudart_include)
  if(EXISTS "${_cudart_include}/cuda_runtime_api.h")
    file(STRINGS "${_cudart_include}/cuda_runtime_api.h" _cudart_line REGEX "#define CUDART_VERSION +[0-9]+")
    string(REGEX REPLACE ".*CUDART_VERSION +([0-9]+).*" "\\1" _cudart_number "${_cudart_line}")
    if(_cudart_number)
      math(EXPR _major "${_cudart_number} / 1000")
      math(EXPR _minor "(${_cudart_number} % 1000) / 10")
      set(CUDARuntime_VERSION "${_major}.${_minor}")
    endif()
  endif()
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUDARuntime
  REQUIRED_VARS CUDARUNTIME_LIBRARY CUDARUNTIME_INCLUDE_DIR
  VERSION_VAR CUDARuntime_VERSION)

if(CUDARuntime_FOUND AND NOT TARGET CUDA::cudart)
  add_library(CUDA::cudart UNKNOWN IMPORTED)
  set_target_properties(CUDA::cudart PROPERTIES
    IMPORTED_LOCATION "${CUDARUNTIME_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${CUDARUNTIME_INCLUDE_DIR}")
endif()
mark_as_advanced(CUDARUNTIME_INCLUDE_DIR CUDARUNTIME_LIBRARY)
