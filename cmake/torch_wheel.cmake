# libtorch from a PyPI torch wheel (CMAKE_PREFIX_PATH=torch.utils.cmake_prefix_path):
# its CUDA libraries (libtorch_cuda.so) carry no RUNPATH, since torch's
# Python preloads the CUDA runtime, cuDNN and NCCL from the nvidia-* wheels
# beside it (site-packages/nvidia/*/lib). A C++ program linked against it
# has to name those directories itself, or the linker and the loader take
# whatever libnccl.so.2 or libcudart.so the system has (a CUDA toolkit's
# older NCCL lacks symbols libtorch_cuda needs). batchd_torch_wheel_rpath
# does so, as DT_RPATH (--disable-new-dtags) so that it also applies to the
# libraries' own dependencies; TORCH_LIBRARIES carries it to every target
# that links libtorch. Nothing changes for a libtorch outside a wheel.
if(NOT TORCH_INSTALL_PREFIX)
  return()
endif()
file(GLOB batchd_nvidia_lib_dirs LIST_DIRECTORIES true
     "${TORCH_INSTALL_PREFIX}/../nvidia/*/lib")
if(NOT batchd_nvidia_lib_dirs)
  return()
endif()
add_library(batchd_torch_wheel_rpath INTERFACE)
set(batchd_rpath_flags "-Wl,--disable-new-dtags")
foreach(dir IN LISTS batchd_nvidia_lib_dirs)
  get_filename_component(dir "${dir}" REALPATH)
  list(APPEND batchd_rpath_flags "-Wl,-rpath,${dir}")
endforeach()
target_link_options(batchd_torch_wheel_rpath INTERFACE ${batchd_rpath_flags})
list(APPEND TORCH_LIBRARIES batchd_torch_wheel_rpath)
message(STATUS "libtorch of a torch wheel: run paths to ${batchd_nvidia_lib_dirs}")
