The [[ meta "pack.name" . ]] pack ([[ meta "pack.version" . ]]) registered the job [[ template "job_name" . ]] in the namespace [[ var "namespace" . | quote ]]: [[ var "count" . ]] replica(s), one of which leads.

Find the replicas with `nomad job status -namespace [[ var "namespace" . ]] [[ coalesce (var "job_name" .) (meta "pack.name" .) ]]`, or let the gpushare CLI find the leader through the Nomad service gpushare-scheduler: `gpushare status`.
