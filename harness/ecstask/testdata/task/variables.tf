variable "command" {
  type    = string
  default = "/app"
}

variable "with_sidecar" {
  type    = bool
  default = true
}

variable "secret_arn" {
  type = string
}
