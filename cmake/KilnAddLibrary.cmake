# kiln_add_library(NAME SOURCES file... [DEPENDS target...] [LINK library...]
#                  [LLVM_CONVENTIONS])
#
# A static library of Kiln's compiler half: Kiln's headers and the generated ones on its
# public include path (for embedders too, through the installed package), its link
# libraries public, and installed into the KilnTargets export set. DEPENDS names the
# tablegen targets whose headers its sources include. LLVM_CONVENTIONS builds it the
# way LLVM and MLIR are built (no exceptions, no RTTI).
function(kiln_add_library name)
  cmake_parse_arguments(ARG "LLVM_CONVENTIONS" "" "SOURCES;DEPENDS;LINK" ${ARGN})
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "kiln_add_library(${name}): unknown arguments ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  add_library(${name} STATIC ${ARG_SOURCES})
  if(ARG_DEPENDS)
    add_dependencies(${name} ${ARG_DEPENDS})
  endif()
  target_include_directories(${name} PUBLIC
    $<BUILD_INTERFACE:${KILN_SOURCE_DIR}/include>
    $<BUILD_INTERFACE:${KILN_GENERATED_INCLUDE_DIR}>
    $<INSTALL_INTERFACE:include>)
  target_link_libraries(${name} PUBLIC ${ARG_LINK})
  if(ARG_LLVM_CONVENTIONS)
    target_compile_options(${name} PRIVATE -fno-exceptions -fno-rtti)
  endif()
  install(TARGETS ${name} EXPORT KilnTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
endfunction()

# kiln_tablegen_to(OUTPUT ARGS...): LLVM's tablegen() writing the absolute path OUTPUT
# (under the generated include directory). tablegen() declares its output as
# CMAKE_CURRENT_BINARY_DIR/<name>; given an absolute name, that declared output is a
# path nothing writes, so Ninja would not know the file is generated and would compile
# its includers against the old one within a build. A name relative to the current
# binary directory declares the real file.
function(kiln_tablegen_to output)
  file(RELATIVE_PATH relative ${CMAKE_CURRENT_BINARY_DIR} ${output})
  tablegen(MLIR ${relative} ${ARGN})
  set(TABLEGEN_OUTPUT ${TABLEGEN_OUTPUT} PARENT_SCOPE)
endfunction()
