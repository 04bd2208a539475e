# Locate the NVIDIA pip wheels (nvidia-cublas, nvidia-cudnn-cu13, ...) of the Python on PATH, so a
# machine without a system cuBLAS/cuDNN can build against `pip install nvidia-cublas nvidia-cudnn-cu13`.
# Sets DLBENCH_NVIDIA_WHEEL_DIR to <site-packages>/nvidia when it exists (empty otherwise).

set(DLBENCH_NVIDIA_WHEEL_DIR "" CACHE PATH "site-packages/nvidia folder of the NVIDIA pip wheels (auto-detected when empty)")
if(DLBENCH_NVIDIA_WHEELS AND NOT DLBENCH_NVIDIA_WHEEL_DIR)
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_Interpreter_FOUND)
    execute_process(
      COMMAND "${Python3_EXECUTABLE}" -c
              "import site, sys, os; dirs = site.getsitepackages() + [site.getusersitepackages()]; print(next((os.path.join(d, 'nvidia') for d in dirs if os.path.isdir(os.path.join(d, 'nvidia'))), ''))"
      OUTPUT_VARIABLE _dlbench_wheel_dir
      OUTPUT_STRIP_TRAILING_WHITESPACE
      RESULT_VARIABLE _dlbench_wheel_result)
    if(_dlbench_wheel_result EQUAL 0 AND _dlbench_wheel_dir)
      set(DLBENCH_NVIDIA_WHEEL_DIR "${_dlbench_wheel_dir}" CACHE PATH "site-packages/nvidia folder of the NVIDIA pip wheels" FORCE)
    endif()
  endif()
endif()
if(DLBENCH_NVIDIA_WHEEL_DIR)
  message(STATUS "NVIDIA pip wheels: ${DLBENCH_NVIDIA_WHEEL_DIR}")
endif()
