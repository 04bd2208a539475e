# FindCUDNNFrontend: the header-only C++ API of cudnn-frontend (cuDNN's graph API, the layer PyTorch uses).
#
# Looks in CUDNN_FRONTEND_ROOT (variable or environment), beside cuDNN's headers, and in the
# nvidia-cudnn-frontend pip wheel, which installs its headers to <site-packages>/include (the folder beside
# <site-packages>/nvidia, see NvidiaWheels.cmake).
#
# Result: CUDNNFrontend_FOUND, CUDNN_FRONTEND_VERSION, CUDNN_FRONTEND_INCLUDE_DIR and the target
# CUDNN::frontend.

set(_cudnn_frontend_hints ${CUDNN_FRONTEND_ROOT} $ENV{CUDNN_FRONTEND_ROOT})
if(CUDNN_INCLUDE_DIR)
  list(APPEND _cudnn_frontend_hints ${CUDNN_INCLUDE_DIR}/..)
endif()
if(DLBENCH_NVIDIA_WHEEL_DIR)
  get_filename_component(_site_packages "${DLBENCH_NVIDIA_WHEEL_DIR}" DIRECTORY)
  list(APPEND _cudnn_frontend_hints ${_site_packages})
endif()

find_path(CUDNN_FRONTEND_INCLUDE_DIR cudnn_frontend.h HINTS ${_cudnn_frontend_hints} PATH_SUFFIXES include)

if(CUDNN_FRONTEND_INCLUDE_DIR AND EXISTS "${CUDNN_FRONTEND_INCLUDE_DIR}/cudnn_frontend_version.h")
  file(STRINGS "${CUDNN_FRONTEND_INCLUDE_DIR}/cudnn_frontend_version.h" _fe_lines
       REGEX "#define CUDNN_FRONTEND_(MAJOR|MINOR|PATCH)_VERSION +[0-9]+")
  string(REGEX REPLACE ".*MAJOR_VERSION +([0-9]+).*" "\\1" _major "${_fe_lines}")
  string(REGEX REPLACE ".*MINOR_VERSION +([0-9]+).*" "\\1" _minor "${_fe_lines}")
  string(REGEX REPLACE ".*PATCH_VERSION +([0-9]+).*" "\\1" _patch "${_fe_lines}")
  set(CUDNN_FRONTEND_VERSION "${_major}.${_minor}.${_patch}")
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUDNNFrontend
  REQUIRED_VARS CUDNN_FRONTEND_INCLUDE_DIR
  VERSION_VAR CUDNN_FRONTEND_VERSION)

if(CUDNNFrontend_FOUND AND NOT TARGET CUDNN::frontend)
  add_library(CUDNN::frontend INTERFACE IMPORTED)
  set_target_properties(CUDNN::frontend PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${CUDNN_FRONTEND_INCLUDE_DIR}")
endif()
mark_as_advanced(CUDNN_FRONTEND_INCLUDE_DIR)
