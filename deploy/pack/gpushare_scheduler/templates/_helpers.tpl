[[- /* The job's name, quoted: job_name, else the pack's name. */ -]]
[[- define "job_name" -]]
[[ coalesce (var "job_name" .) (meta "pack.name" .) | quote ]]
[[- end -]]

[[- /* The Nomad Variable that holds the token: token_variable, else the
       job's own (nomad/jobs/<job>), which its workload identity may read. */ -]]
[[- define "token_variable" -]]
[[ coalesce (var "token_variable" .) (printf "nomad/jobs/%s" (coalesce (var "job_name" .) (meta "pack.name" .))) ]]
[[- end -]]

[[- define "region" -]]
[[- if var "region" . ]]
  region      = [[ var "region" . | quote ]]
[[- end -]]
[[- end -]]

[[- define "node_pool" -]]
[[- if var "node_pool" . ]]
  node_pool   = [[ var "node_pool" . | quote ]]
[[- end -]]
[[- end -]]
