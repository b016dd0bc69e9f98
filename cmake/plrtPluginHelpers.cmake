# plrt_add_plugin(): builds a plrt plugin the way plrt's own tree builds its plugins.  The same file
# serves the tree (included by the top-level CMakeLists.txt) and third parties (installed beside
# plrtConfig.cmake, which includes it after find_package(plrt)).
#
#   plrt_add_plugin(<kind> <name>
#                   SOURCES <file>...            the plugin's sources (C or C++)
#                   [LIBS <lib>...]              what else it links (privately)
#                   [OUTPUT_DIRECTORY <dir>]     where the .so is built
#                                                (default: ${PLRT_PLUGIN_OUTPUT_DIRECTORY}, else the
#                                                current binary folder)
#                   [INSTALL_DESTINATION <dir>]  install() destination
#                                                (default: ${CMAKE_INSTALL_LIBDIR}/plrt/plugins)
#                   [COMPONENT <name>]           install component (default: ${PLRT_PLUGIN_COMPONENT},
#                                                else "runtime")
#                   [NO_INSTALL])
#
# <kind> is accelerator, process_group or strategy; <name> is what users pass (--strategy <name>):
# 1-64 characters of a-z, 0-9, '_' and '-'.  The result is the MODULE library
# libplrt_<kind>_<name>.so, target plrt_<kind>_<name>, which the runtime finds by name in its
# plugin folder or a PL_PLUGIN_PATH folder.  It links plrt::plugin_api (headers only) and nothing of
# the runtime: -Wl,--no-undefined proves that every symbol it uses resolves from its own
# dependencies, and plrt_exports.map (a linker version script) exports the pl_* entry symbols and
# nothing else.
include_guard(GLOBAL)
include(GNUInstallDirs)
set(PLRT_EXPORTS_MAP "${CMAKE_CURRENT_LIST_DIR}/plrt_exports.map")

function(plrt_add_plugin kind name)
  cmake_parse_arguments(P "NO_INSTALL" "OUTPUT_DIRECTORY;INSTALL_DESTINATION;COMPONENT" "SOURCES;LIBS" ${ARGN})
  set(kinds accelerator process_group strategy)
  if(NOT kind IN_LIST kinds)
    message(FATAL_ERROR "plrt_add_plugin: kind '${kind}' is not one of: accelerator, process_group, strategy")
  endif()
  string(LENGTH "${name}" name_length)
  if(NOT name MATCHES "^[a-z0-9_-]+$" OR name_length GREATER 64)
    message(FATAL_ERROR "plrt_add_plugin: name '${name}' is not valid: use 1-64 characters of a-z, 0-9, '_' and '-'")
  endif()
  if(NOT P_SOURCES)
    message(FATAL_ERROR "plrt_add_plugin(${kind} ${name}): no SOURCES given")
  endif()
  if(P_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "plrt_add_plugin(${kind} ${name}): unknown arguments ${P_UNPARSED_ARGUMENTS}; "
                        "valid: SOURCES, LIBS, OUTPUT_DIRECTORY, INSTALL_DESTINATION, COMPONENT, NO_INSTALL")
  endif()
  if(NOT TARGET plrt::plugin_api)
    message(FATAL_ERROR "plrt_add_plugin: target plrt::plugin_api is missing; call find_package(plrt) first")
  endif()
  if(NOT P_OUTPUT_DIRECTORY)
    if(PLRT_PLUGIN_OUTPUT_DIRECTORY)
      set(P_OUTPUT_DIRECTORY ${PLRT_PLUGIN_OUTPUT_DIRECTORY})
    else()
      set(P_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
    endif()
  endif()
  if(NOT P_INSTALL_DESTINATION)
    set(P_INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/plrt/plugins)
  endif()
  if(NOT P_COMPONENT)
    if(PLRT_PLUGIN_COMPONENT)
      set(P_COMPONENT ${PLRT_PLUGIN_COMPONENT})
    else()
      set(P_COMPONENT runtime)
    endif()
  endif()

  set(target plrt_${kind}_${name})
  add_library(${target} MODULE ${P_SOURCES})
  target_link_libraries(${target} PRIVATE plrt::plugin_api ${P_LIBS})
  target_link_options(${target} PRIVATE -Wl,--no-undefined "-Wl,--version-script=${PLRT_EXPORTS_MAP}")
  set_target_properties(${target} PROPERTIES LINK_DEPENDS "${PLRT_EXPORTS_MAP}"
    PREFIX "lib" SUFFIX ".so" OUTPUT_NAME plrt_${kind}_${name}
    LIBRARY_OUTPUT_DIRECTORY ${P_OUTPUT_DIRECTORY}
    C_STANDARD 99 C_STANDARD_REQUIRED ON
    C_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
    POSITION_INDEPENDENT_CODE ON)
  if(NOT P_NO_INSTALL)
    install(TARGETS ${target} LIBRARY DESTINATION ${P_INSTALL_DESTINATION} COMPONENT ${P_COMPONENT})
  endif()
endfunction()
