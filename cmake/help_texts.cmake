# Writes OUTPUT_DIR/drover.txt (`drover --help`) and OUTPUT_DIR/drover-CMD.txt
# (`drover CMD --help`) for every command `drover --help` lists, as printed.
#   cmake -DDROVER=build/bin/drover -DOUTPUT_DIR=build/help -P help_texts.cmake
# drover is run as `drover`, found on PATH through a link, since CLI11 prints
# argv[0] in "Usage:" and the texts must not name the build tree.
get_filename_component(link_dir "${OUTPUT_DIR}/../help-bin" ABSOLUTE)
file(MAKE_DIRECTORY "${OUTPUT_DIR}" "${link_dir}")
file(CREATE_LINK "${DROVER}" "${link_dir}/drover" SYMBOLIC)
set(drover ${CMAKE_COMMAND} -E env "PATH=${link_dir}:$ENV{PATH}" drover)

execute_process(COMMAND ${drover} --help OUTPUT_VARIABLE top RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${DROVER} --help failed (${rc})")
endif()
# CLI11 lists the commands after "Subcommands:", one per line, indented by two.
string(REGEX MATCH "\n(Subcommands|SUBCOMMANDS):\n.*" listing "${top}")
if(NOT listing)
  message(FATAL_ERROR "${DROVER} --help lists no subcommands:\n${top}")
endif()
string(REGEX MATCHALL "\n  [a-z][a-z-]*" names "${listing}")
foreach(name IN LISTS names)
  string(STRIP "${name}" name)
  execute_process(COMMAND ${drover} ${name} --help OUTPUT_VARIABLE text RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${DROVER} ${name} --help failed (${rc})")
  endif()
  file(WRITE "${OUTPUT_DIR}/drover-${name}.txt" "${text}")
endforeach()
file(WRITE "${OUTPUT_DIR}/drover.txt" "${top}")
