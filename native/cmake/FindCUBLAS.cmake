# FindCUBLAS: cuBLAS from the CUDA toolkit (CUDA::cublas) or, where the toolkit has none, from the
# nvidia-cublas pip wheel (<site-packages>/nvidia/cu13 or the older <site-packages>/nvidia/cublas).
#
# Result: CUBLAS_FOUND, CUBLAS_INCLUDE_DIR, CUBLAS_LIBRARY, CUBLASLT_LIBRARY and the targets CUBLAS::cublas,
# CUBLAS::cublasLt (when found).

if(TARGET CUDA::cublas)
  get_target_property(CUBLAS_LIBRARY CUDA::cublas IMPORTED_LOCATION)
  set(CUBLAS_INCLUDE_DIR "${CUDAToolkit_INCLUDE_DIRS}")
  if(TARGET CUDA::cublasLt)
    get_target_property(CUBLASLT_LIBRARY CUDA::cublasLt IMPORTED_LOCATION)
  endif()
else()
  set(_cublas_hints ${CUBLAS_ROOT} $ENV{CUBLAS_ROOT})
  if(DLBENCH_NVIDIA_WHEEL_DIR)
    list(APPEND _cublas_hints ${DLBENCH_NVIDIA_WHEEL_DIR}/cu13 ${DLBENCH_NVIDIA_WHEEL_DIR}/cublas)
  endif()
  find_path(CUBLAS_INCLUDE_DIR cublas_v2.h HINTS ${_cublas_hints} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
  find_library(CUBLAS_LIBRARY NAMES cublas libcublas.so.13 libcublas.so.12
    HINTS ${_cublas_hints} ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64)
  find_library(CUBLASLT_LIBRARY NAMES cublasLt libcublasLt.so.13 libcublasLt.so.12
    HINTS ${_cublas_hints} ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64)
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUBLAS REQUIRED_VARS CUBLAS_LIBRARY CUBLAS_INCLUDE_DIR)

if(CUBLAS_FOUND AND NOT TARGET CUBLAS::cublas)
  if(TARGET CUDA::cublas)
    add_library(CUBLAS::cublas INTERFACE IMPORTED)
    set_target_properties(CUBLAS::cublas PROPERTIES INTERFACE_LINK_LIBRARIES CUDA::cublas)
  else()
    add_library(CUBLAS::cublas UNKNOWN IMPORTED)
    set_target_properties(CUBLAS::cublas PROPERTIES
      IMPORTED_LOCATION "${CUBLAS_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${CUBLAS_INCLUDE_DIR}")
  endif()
endif()
if(CUBLAS_FOUND AND CUBLASLT_LIBRARY AND NOT TARGET CUBLAS::cublasLt)
  if(TARGET CUDA::cublasLt)
    add_library(CUBLAS::cublasLt INTERFACE IMPORTED)
    set_target_properties(CUBLAS::cublasLt PROPERTIES INTERFACE_LINK_LIBRARIES CUDA::cublasLt)
  else()
    add_library(CUBLAS::cublasLt UNKNOWN IMPORTED)
    set_target_properties(CUBLAS::cublasLt PROPERTIES
      IMPORTED_LOCATION "${CUBLASLT_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${CUBLAS_INCLUDE_DIR}")
  endif()
endif()
mark_as_advanced(CUBLAS_INCLUDE_DIR CUBLAS_LIBRARY CUBLASLT_LIBRARY)
