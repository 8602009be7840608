# Precompiled headers. Most of a C++ file's compile time here is parsing the same large headers
# (gRPC, the generated protocol, gtest): service_test.cc spends 4.8 of its 11.8 s on them, 2 cores.
# A target made for it compiles them once into a precompiled header (target_precompile_headers)
# and every target that includes them reuses it (REUSE_FROM): a clean build on 2 cores fell from
# 850 to 646 s with the tests' header, to 512 s with the product's as well (bench/NOTES.md,
# "Build time").
#
# GCC takes a precompiled header only under the flags it was made with (-pthread, say), so each
# reusing target also links the header's usage target, the requirements it was built under;
# definitions a target adds are harmless as long as those headers do not use them. Targets with
# CUDA sources, shared libraries and the fuzz build (clang, sanitizers, PP_FUZZ) compile plainly;
# -DCMAKE_DISABLE_PRECOMPILE_HEADERS=ON turns it all off (the code includes what it uses either
# way).

# pp_add_pch(<name> <header> <usage libraries>...): the OBJECT library <name> that makes
# <header>'s precompiled header, and the INTERFACE library <name>_usage of its requirements.
function(pp_add_pch name header)
  add_library(${name}_usage INTERFACE)
  target_link_libraries(${name}_usage INTERFACE ${ARGN})
  file(CONFIGURE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/${name}.cc  # rewritten only when it changes
    CONTENT "// Compiled so that ${name}'s header is.\n")
  add_library(${name} OBJECT ${CMAKE_CURRENT_BINARY_DIR}/${name}.cc)
  target_link_libraries(${name} PRIVATE ${name}_usage)
  target_precompile_headers(${name} PRIVATE ${header})
endfunction()

# pp_reuse_pch(<dir> <name> <regex>): every executable and static library defined in <dir> or
# below whose own link libraries match <regex> reuses <name>'s precompiled header.
function(pp_reuse_pch dir name regex)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  foreach(target ${targets})
    get_target_property(type ${target} TYPE)
    get_target_property(libraries ${target} LINK_LIBRARIES)
    get_target_property(sources ${target} SOURCES)
    list(FILTER sources INCLUDE REGEX "\\.cu$")
    if((type STREQUAL "EXECUTABLE" OR type STREQUAL "STATIC_LIBRARY") AND
       "${libraries}" MATCHES "${regex}" AND NOT sources)
      target_link_libraries(${target} PRIVATE ${name}_usage)
      target_precompile_headers(${target} REUSE_FROM ${name})
    endif()
  endforeach()
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(subdir ${subdirs})
    pp_reuse_pch(${subdir} ${name} "${regex}")
  endforeach()
endfunction()

set(PP_PCH OFF)
if(NOT PP_FUZZ AND NOT CMAKE_DISABLE_PRECOMPILE_HEADERS)
  set(PP_PCH ON)
endif()
