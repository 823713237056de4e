# tflint's bundled Terraform ruleset (works offline: no plugin download).
# "all" is stricter than the default "recommended" preset: naming, documented
# variables and outputs, typed variables, unused declarations, standard module layout.
plugin "terraform" {
  enabled = true
  preset  = "all"
}
