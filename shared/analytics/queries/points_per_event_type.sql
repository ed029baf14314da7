-- Points per activity type per UTC day: events and points awarded.
SELECT dt AS day, activity_type, COUNT(*) AS events, SUM(points) AS points
FROM rally_events
WHERE event_type = 'activity.recorded'
GROUP BY dt, activity_type
ORDER BY dt, activity_type
