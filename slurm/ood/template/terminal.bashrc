# The start-up file of this session's JupyterLab terminals (bash --rcfile, set in before.sh's config).
# JupyterLab's own default is a login shell, whose /etc/profile sets PATH to the site's: `python` was then
# "command not found" (or the system's) while the notebooks' kernel ran the course's. A login shell's files
# are read here as a login shell reads them, then the course's environment goes first on PATH again, so
# `python`, `workshop` and `jupyter` in a terminal are the kernel's.
[ -r /etc/profile ] && . /etc/profile
for __rc in "${HOME}/.bash_profile" "${HOME}/.bash_login" "${HOME}/.profile"; do
  if [ -r "${__rc}" ]; then . "${__rc}"; break; fi
done
unset __rc
# WORKSHOP_COURSE_PATH: the PATH script.sh ran JupyterLab with, after the site's [env] setup
if [ -n "${WORKSHOP_COURSE_PATH:-}" ]; then
  __path=""
  IFS=: read -r -a __dirs <<< "${WORKSHOP_COURSE_PATH}:${PATH}"
  for __d in "${__dirs[@]}"; do
    case ":${__path}:" in *":${__d}:"*) ;; *) [ -n "${__d}" ] && __path="${__path:+${__path}:}${__d}" ;; esac
  done
  export PATH="${__path}"
  unset __path __dirs __d
fi
