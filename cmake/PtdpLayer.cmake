# Per-target include roots: the build, not only a grep, holds the layering (docs/design-notes.md,
# "The build holds the layering").
#
# Sources include from the source root ("core/status.h", "runtime/model/params.h"). A global
# include_directories(${PROJECT_SOURCE_DIR}) would let any file include any layer. Instead each
# library owns an include root in the build tree that holds one symlink named after its folder:
#   ${CMAKE_BINARY_DIR}/include/<target>/<folder>  ->  ${PROJECT_SOURCE_DIR}/<folder>
# and that root is the library's PUBLIC include directory. A target therefore sees its own folder
# and the folders of the libraries it links: PUBLIC links pass on to its dependents, PRIVATE links
# stop at the target. Including a layer one does not link fails to compile ("No such file or
# directory"); tests/layering/CMakeLists.txt proves it. Nothing is copied: edits in the source
# tree are seen at once, and compiler diagnostics name the build-tree path of the link.

# ptdp_include_root(<out-var> <name> <folder> [EXCLUDE <subfolder>...])
# Makes ${CMAKE_BINARY_DIR}/include/<name>/<folder> show ${PROJECT_SOURCE_DIR}/<folder> and sets
# <out-var> to ${CMAKE_BINARY_DIR}/include/<name>. Without EXCLUDE the folder is one symlink. With
# EXCLUDE (a sub-library's folder inside this one, e.g. runtime/cuda) it is a real folder with one
# symlink per entry of the source folder, less the excluded ones; the entries are globbed with
# CONFIGURE_DEPENDS, so a new file or subfolder re-runs CMake and appears on the next build.
function(ptdp_include_root out name folder)
  cmake_parse_arguments(A "" "" "EXCLUDE" ${ARGN})
  set(root ${CMAKE_BINARY_DIR}/include/${name})
  set(src ${PROJECT_SOURCE_DIR}/${folder})
  set(dst ${root}/${folder})
  if(NOT IS_DIRECTORY ${src})
    message(FATAL_ERROR "ptdp_include_root: ${src} is not a folder")
  endif()
  get_filename_component(parent ${dst} DIRECTORY)
  file(MAKE_DIRECTORY ${parent})
  if(NOT A_EXCLUDE)
    if(IS_DIRECTORY ${dst} AND NOT IS_SYMLINK ${dst})
      # Was a folder of links (EXCLUDE before): drop the links, then the folder.
      file(GLOB old LIST_DIRECTORIES true ${dst}/*)
      foreach(o ${old})
        if(IS_SYMLINK ${o})
          file(REMOVE ${o})
        endif()
      endforeach()
      file(REMOVE_RECURSE ${dst})
    endif()
    file(CREATE_LINK ${src} ${dst} SYMBOLIC)
  else()
    if(IS_SYMLINK ${dst})
      file(REMOVE ${dst})
    endif()
    file(MAKE_DIRECTORY ${dst})
    file(GLOB old LIST_DIRECTORIES true ${dst}/*)
    foreach(o ${old})
      if(IS_SYMLINK ${o})
        file(REMOVE ${o})
      endif()
    endforeach()
    file(GLOB entries CONFIGURE_DEPENDS LIST_DIRECTORIES true RELATIVE ${src} ${src}/*)
    foreach(e ${entries})
      if(NOT e IN_LIST A_EXCLUDE AND NOT e STREQUAL "CMakeLists.txt")
        file(CREATE_LINK ${src}/${e} ${dst}/${e} SYMBOLIC)
      endif()
    endforeach()
  endif()
  set(${out} ${root} PARENT_SCOPE)
endfunction()

# ptdp_layer(<target> <folder> [EXCLUDE <subfolder>...])
# Gives library <target> the include root of <folder> as its PUBLIC include directory. Link the
# libraries whose headers appear in <target>'s public headers PUBLIC, all others PRIVATE.
function(ptdp_layer target folder)
  ptdp_include_root(root ${target} ${folder} ${ARGN})
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${root}>)
endfunction()
