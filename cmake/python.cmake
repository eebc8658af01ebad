# The Python used for the plot tests and the pybind11 module: Debian's /usr/bin/python3 (where
# python3-numpy, python3-matplotlib, python3-scipy and pybind11 are installed by
# scripts/install-deps.sh) unless -DSTEERMOE_PYTHON_EXECUTABLE=... says otherwise. A python3
# earlier on PATH (pyenv, a venv) does not see the Debian packages, so it is not the default.
if(NOT STEERMOE_PYTHON_EXECUTABLE)
  if(EXISTS /usr/bin/python3)
    set(_sm_python /usr/bin/python3)
  else()
    find_program(_sm_python python3)
  endif()
  set(STEERMOE_PYTHON_EXECUTABLE "${_sm_python}" CACHE FILEPATH "Python for plot tests and the module")
endif()
