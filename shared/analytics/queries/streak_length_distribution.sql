-- Streak length distribution per UTC day: how many active players reached each streak length.
SELECT day, streak, COUNT(*) AS players
FROM (
  SELECT dt AS day, user_pid, MAX(streak) AS streak
  FROM rally_events
  WHERE event_type = 'activity.recorded'
  GROUP BY dt, user_pid
) AS per_player
GROUP BY day, streak
ORDER BY day, streak
