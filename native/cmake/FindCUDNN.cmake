# FindCUDNN: cuDNN headers and library.
#
# Looks in CUDNN_ROOT (variable or environment), the CUDA toolkit, the usual system folders, and the
# nvidia-cudnn-cu* pip wheel (<site-packages>/nvidia/cudnn, see NvidiaWheels.cmake). Wheels ship only
# versioned libraries (libcudnn.so.9), so those names are searched too.
#
# Result: CUDNN_FOUND, CUDNN_VERSION, CUDNN_INCLUDE_DIR, CUDNN_LIBRARY and the target CUDNN::cudnn.

set(_cudnn_hints ${CUDNN_ROOT} $ENV{CUDNN_ROOT} $ENV{CUDNN_PATH})
if(CUDAToolkit_LIBRARY_ROOT)
  list(APPEND _cudnn_hints ${CUDAToolkit_LIBRARY_ROOT})
endif()
if(DLBENCH_NVIDIA_WHEEL_DIR)
  list(APPEND _cudnn_hints ${DLBENCH_NVIDIA_WHEEL_DIR}/cudnn)
endif()

find_path(CUDNN_INCLUDE_DIR cudnn.h
  HINTS ${_cudnn_hints} ${CUDAToolkit_INCLUDE_DIRS}
  PATH_SUFFIXES include include/x86_64-linux-gnu)
find_library(CUDNN_LIBRARY
  NAMES cudnn libcudnn.so.9 libcudnn.so.8
  HINTS ${_cudnn_hints} ${CUDAToolkit_LIBRARY_DIR}
  PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu)

if(CUDNN_INCLUDE_DIR)
  foreach(_header cudnn_version.h cudnn.h)
    if(EXISTS "${CUDNN_INCLUDE_DIR}/${_header}")
      file(STRINGS "${CUDNN_INCLUDE_DIR}/${_header}" _cudnn_version_lines REGEX "#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) +[0-9]+")
      if(_cudnn_version_lines)
        string(REGEX REPLACE ".*CUDNN_MAJOR +([0-9]+).*" "\\1" _major "${_cudnn_version_lines}")
        string(REGEX REPLACE ".*CUDNN_MINOR +([0-9]+).*" "\\1" _minor "${_cudnn_version_lines}")
        string(REGEX REPLACE ".*CUDNN_PATCHLEVEL +([0-9]+).*" "\\1" _patch "${_cudnn_version_lines}")
        set(CUDNN_VERSION "${_major}.${_minor}.${_patch}")
        break()
      endif()
    endif()
  endforeach()
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUDNN
  REQUIRED_VARS CUDNN_LIBRARY CUDNN_INCLUDE_DIR
  VERSION_VAR CUDNN_VERSION)

if(CUDNN_FOUND AND NOT TARGET CUDNN::cudnn)
  add_library(CUDNN::cudnn UNKNOWN IMPORTED)
  set_target_properties(CUDNN::cudnn PROPERTIES
    IMPORTED_LOCATION "${CUDNN_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${CUDNN_INCLUDE_DIR}")
endif()
mark_as_advanced(CUDNN_INCLUDE_DIR CUDNN_LIBRARY)
