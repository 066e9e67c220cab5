# Target tracking on the backlog per task: Application Auto Scaling keeps
#
#   ApproximateNumberOfMessagesVisible (the queue) / RunningTaskCount (the service)
#
# near target_messages_per_task, between min_tasks and max_tasks. Choose the target as
#
#   target = messages per second one task processes x the longest acceptable queueing delay (s)
#
# For example (illustrative numbers, not a measurement): a task that processes 40 messages/s in
# your load test, and a backlog you accept to wait up to 120 s, give 40 x 120 = 4800 messages per
# task; 30000 visible messages then ask for 30000 / 4800 = 6.25, so 7 tasks. See ../../README.md.
#
# The denominator is Container Insights' RunningTaskCount (namespace ECS/ContainerInsights,
# dimensions ClusterName and ServiceName): the number of the service's tasks in the RUNNING state.
# Container Insights must be on for the cluster (its containerInsights setting: enabled or
# enhanced; it bills its metrics as custom metrics). Without it the expression has no data, the
# policy's alarms stay in INSUFFICIENT_DATA, and the service stays at the count it has. (AWS/ECS
# CPUUtilization's SampleCount is not a task count: it counts datapoints.)
#
# min_tasks is at least 1: at zero running tasks the quotient has no value, so target tracking
# could not scale out from zero.

resource "aws_appautoscaling_target" "worker" {
  service_namespace  = "ecs"
  scalable_dimension = "ecs:service:DesiredCount"
  resource_id        = "service/${local.cluster_name}/${aws_ecs_service.worker.name}"
  min_capacity       = var.min_tasks
  max_capacity       = var.max_tasks
}

resource "aws_appautoscaling_policy" "backlog_per_task" {
  name               = "${var.name}-worker-backlog-per-task"
  policy_type        = "TargetTrackingScaling"
  service_namespace  = aws_appautoscaling_target.worker.service_namespace
  scalable_dimension = aws_appautoscaling_target.worker.scalable_dimension
  resource_id        = aws_appautoscaling_target.worker.resource_id

  target_tracking_scaling_policy_configuration {
    target_value       = var.target_messages_per_task
    scale_out_cooldown = var.scale_out_cooldown_seconds
    scale_in_cooldown  = var.scale_in_cooldown_seconds

    customized_metric_specification {
      metrics {
        id          = "visible"
        label       = "Messages waiting in ${module.queue.queue_name}"
        return_data = false

        metric_stat {
          metric {
            namespace   = "AWS/SQS"
            metric_name = "ApproximateNumberOfMessagesVisible"

            dimensions {
              name  = "QueueName"
              value = module.queue.queue_name
            }
          }
          stat = "Average"
        }
      }

      metrics {
        id          = "tasks"
        label       = "Running tasks of ${aws_ecs_service.worker.name}"
        return_data = false

        metric_stat {
          metric {
            namespace   = "ECS/ContainerInsights"
            metric_name = "RunningTaskCount"

            dimensions {
              name  = "ClusterName"
              value = local.cluster_name
            }

            dimensions {
              name  = "ServiceName"
              value = aws_ecs_service.worker.name
            }
          }
          stat = "Average"
        }
      }

      metrics {
        id          = "backlog_per_task"
        label       = "Messages waiting per running task"
        expression  = "visible / tasks"
        return_data = true
      }
    }
  }
}
