# Cross build for 64-bit ARM Linux (arm64) on a Debian x86-64 host, run under qemu-user
# (docs/arm.md; scripts/check-aarch64.sh drives it).
#
#   apt-get install g++-aarch64-linux-gnu qemu-user
#   dpkg --add-architecture arm64 && apt-get update
#   apt-get install libpcre2-dev:arm64 libutf8proc-dev:arm64 libcpp-httplib-dev:arm64 libgomp1:arm64
#
# The arm64 libraries live beside the host's (Debian multiarch: /usr/lib/aarch64-linux-gnu, headers
# shared in /usr/include); header-only packages (Eigen, nlohmann-json, CLI11, doctest) are the host's.
# Packages that cannot be installed for both architectures at once (libsentencepiece-dev, graphviz)
# come from a private prefix the script unpacks, named by JOURNEY_AARCH64_PREFIX (its pkgconfig/ is
# searched first).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# Tests and programs built here run through qemu (ctest, and add_test commands naming a target).
# The loader and libc must come from one glibc: with the arm64 libc6 of multiarch installed (the
# arm64 -dev packages pull it in) that is /lib/ld-linux-aarch64.so.1 and /usr/lib/aarch64-linux-gnu,
# and qemu needs no prefix. `-L /usr/aarch64-linux-gnu` (the cross toolchain's loader) would then
# load the multiarch libc.so.6 of another build beside its own ld.so, and the first pthread_create
# spins forever (measured: glibc 2.36-8cross1 ld.so with 2.36-9+deb12u14 libc). Only without the
# multiarch libc is the cross toolchain's own runtime the one to use.
find_program(JOURNEY_QEMU_AARCH64 NAMES qemu-aarch64 qemu-aarch64-static)
if(JOURNEY_QEMU_AARCH64)
  if(EXISTS /lib/ld-linux-aarch64.so.1)
    set(CMAKE_CROSSCOMPILING_EMULATOR ${JOURNEY_QEMU_AARCH64})
  else()
    set(CMAKE_CROSSCOMPILING_EMULATOR ${JOURNEY_QEMU_AARCH64} -L /usr/aarch64-linux-gnu)
  endif()
endif()

# pkg-config: the arm64 .pc files only (never the host's x86-64 ones), then the private prefix.
set(_journey_pc_dirs /usr/lib/aarch64-linux-gnu/pkgconfig /usr/share/pkgconfig)
if(DEFINED ENV{JOURNEY_AARCH64_PREFIX})
  set(JOURNEY_AARCH64_PREFIX $ENV{JOURNEY_AARCH64_PREFIX} CACHE PATH "Private prefix of arm64 packages")
endif()
if(JOURNEY_AARCH64_PREFIX)
  list(PREPEND _journey_pc_dirs ${JOURNEY_AARCH64_PREFIX}/pkgconfig)
  list(APPEND CMAKE_PREFIX_PATH ${JOURNEY_AARCH64_PREFIX}/usr)
endif()
string(REPLACE ";" ":" _journey_pc_path "${_journey_pc_dirs}")
set(ENV{PKG_CONFIG_LIBDIR} "${_journey_pc_path}")
set(ENV{PKG_CONFIG_PATH} "")

# Libraries and headers: the arm64 multiarch directories (CMAKE_LIBRARY_ARCHITECTURE) of the host's
# root; programs (python3, the host tools) from the host.
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)

# The host's Open MPI (mpicxx wraps x86-64 libraries) must not be taken for an arm64 one; the
# tensor-parallel build between processes is optional (without it --tensor-parallel > 1 says so).
set(CMAKE_DISABLE_FIND_PACKAGE_MPI ON)
