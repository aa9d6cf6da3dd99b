# Finds greenpipe's dependencies; a missing one stops configuration with the
# Debian package that provides it and tools/setup-deps.sh, which installs it.
find_package(Threads REQUIRED)
find_package(CUDAToolkit)
if(NOT CUDAToolkit_FOUND)
  message(FATAL_ERROR "greenpipe: CUDA toolkit not found (need nvcc, cudart, cuBLAS/cuBLASLt, NVTX; "
                      "install the NVIDIA CUDA toolkit 12.4+ or set CUDAToolkit_ROOT)")
endif()

function(gp_find_dep var header lib pkg)
  find_path(${var}_INCLUDE_DIR ${header})
  find_library(${var}_LIBRARY ${lib})
  if(NOT ${var}_INCLUDE_DIR OR NOT ${var}_LIBRARY)
    message(FATAL_ERROR "greenpipe: ${header} / lib${lib} not found: run tools/setup-deps.sh (it installs the "
                        "Debian package '${pkg}' and the build's other packages), or add its prefix to CMAKE_PREFIX_PATH")
  endif()
  add_library(gp_dep_${lib} INTERFACE IMPORTED GLOBAL)
  target_include_directories(gp_dep_${lib} INTERFACE ${${var}_INCLUDE_DIR})
  target_link_libraries(gp_dep_${lib} INTERFACE ${${var}_LIBRARY})
  message(STATUS "greenpipe: ${lib}: ${${var}_LIBRARY}")
endfunction()

gp_find_dep(GP_CK ck_ring.h ck libck-dev)
gp_find_dep(GP_JANSSON jansson.h jansson libjansson-dev)
gp_find_dep(GP_CMOCKA cmocka.h cmocka libcmocka-dev)

# PCRE2 (8-bit): the tokenizers' split patterns need Unicode properties and
# lookahead, which POSIX regex lacks. utf8proc: the NFC normalizer of
# Qwen2-style tokenizer.json files (Unicode tables are the library's).
gp_find_dep(GP_PCRE2 pcre2.h pcre2-8 libpcre2-dev)
gp_find_dep(GP_UTF8PROC utf8proc.h utf8proc libutf8proc-dev)

# Serving: the HTTP server of greenpipe serve (libmicrohttpd) and the HTTP
# client of greenpipe bench-serve (libcurl's multi interface).
gp_find_dep(GP_MHD microhttpd.h microhttpd libmicrohttpd-dev)
gp_find_dep(GP_CURL curl/curl.h curl libcurl4-openssl-dev)

if(NOT TARGET CUDA::cublasLt OR NOT TARGET CUDA::cudart_static)
  message(FATAL_ERROR "greenpipe: the CUDA toolkit lacks cudart_static or cuBLASLt")
endif()

# NCCL (optional): multi-GPU runs (comm/). From the CUDA toolkit, or the
# nvidia-nccl wheel of the Python environment (pip install nvidia-nccl-cu13);
# without it everything else builds and multi-GPU runs say they are off.
execute_process(COMMAND python3 -c
                  "import importlib.util as u; s = u.find_spec('nvidia.nccl'); print(list(s.submodule_search_locations)[0] if s else '')"
                OUTPUT_VARIABLE GP_NCCL_WHEEL OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
find_path(GP_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${GP_NCCL_WHEEL}/include)
find_library(GP_NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${CUDAToolkit_LIBRARY_DIR} ${GP_NCCL_WHEEL}/lib)
if(GP_NCCL_INCLUDE_DIR AND GP_NCCL_LIBRARY)
  set(GP_HAVE_NCCL ON)
  add_library(gp_dep_nccl INTERFACE IMPORTED GLOBAL)
  target_include_directories(gp_dep_nccl INTERFACE ${GP_NCCL_INCLUDE_DIR})
  target_link_libraries(gp_dep_nccl INTERFACE ${GP_NCCL_LIBRARY})
  message(STATUS "greenpipe: nccl: ${GP_NCCL_LIBRARY}")
else()
  set(GP_HAVE_NCCL OFF)
  message(STATUS "greenpipe: no NCCL found (nccl.h and libnccl in the CUDA toolkit or the nvidia-nccl wheel): "
                 "multi-GPU runs are off")
endif()
