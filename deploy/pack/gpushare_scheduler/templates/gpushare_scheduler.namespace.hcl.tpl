# The scheduler's namespace, for `nomad namespace apply` (a namespace
# specification). `nomad-pack render` writes it (an auxiliary file):
#
#   nomad namespace apply gpushare_scheduler.namespace.hcl
name        = [[ var "namespace" . | quote ]]
description = "gpushare scheduler"
