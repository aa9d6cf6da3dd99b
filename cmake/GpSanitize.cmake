# GP_SANITIZE: instrument the C sources and all links with gcc/clang sanitizers
# (CI's second build, .ci/sanitizers.sh), e.g. -DGP_SANITIZE="address;undefined".
set(GP_SANITIZE "" CACHE STRING
    "Sanitizers for the C code, a list such as address;undefined (empty: none); thread has its own *_tsan tests")

if(GP_SANITIZE)
  if("thread" IN_LIST GP_SANITIZE)
    # One runtime per process: TSan cannot join ASan, and the TSan tests
    # already build their own instrumented copies of the concurrent code.
    message(FATAL_ERROR "greenpipe: GP_SANITIZE=thread is not supported; the *_tsan tests of the normal "
                        "build cover ThreadSanitizer")
  endif()
  list(JOIN GP_SANITIZE "," _gp_san_list)
  # no-recover: the first report ends the process, so a test cannot pass with
  # a UBSan warning in its log. Frame pointers keep ASan's stacks whole at -O2.
  set(_gp_san_flags -fsanitize=${_gp_san_list} -fno-sanitize-recover=all -fno-omit-frame-pointer)
  # C only: nvcc's device code cannot be instrumented and its host stubs need
  # not be; one genex per flag, since a list inside one genex would be split.
  foreach(f IN LISTS _gp_san_flags)
    add_compile_options($<$<COMPILE_LANGUAGE:C>:${f}>)
  endforeach()
  # Every executable links the runtimes, also those linked as CUDA (through
  # g++ as the host link launcher), since their static libraries hold
  # instrumented C objects. There is no device-link step to keep them from.
  add_link_options(${_gp_san_flags})
  message(STATUS "greenpipe: sanitizers ${_gp_san_list} on C sources and links")
endif()
