# Sourced by the scripts that compile (build.sh, build-cuda.sh, fuzz.sh,
# build-wheel.sh, test-pip.sh): every compile goes through ccache where it
# is installed (scripts/install-deps.sh installs it), so that what one build
# compiled another finds:
#   CCACHE_BASEDIR   the checkout (or a script's own tree, set before this is
#                    sourced): paths under it are hashed relative to the build
#                    directory, so build/, build-asan/, build-cuda/ and another
#                    clone of the tree share hits for the same compile;
#   CCACHE_NOHASHDIR the build directory is not hashed either (with -g it
#                    would be); the debug info of a hit then names a sibling
#                    build directory, whose ../<source> is the same file;
#   CCACHE_DEPEND    no separate preprocessor run on a miss (a cold cache,
#                    as on a fresh CI machine, costs next to nothing more).
# Values already in the environment are kept. Sets ccache_cmake (the cmake
# flags) and, for builds that cmake does not configure here (pip, build),
# exports CMAKE_C/CXX_COMPILER_LAUNCHER.
ccache_cmake=()
if command -v ccache > /dev/null; then
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
  export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
  export CCACHE_DEPEND=${CCACHE_DEPEND:-1}
  export CMAKE_CXX_COMPILER_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER:-ccache}
  export CMAKE_C_COMPILER_LAUNCHER=${CMAKE_C_COMPILER_LAUNCHER:-ccache}
  ccache_cmake=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
