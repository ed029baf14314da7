// ExecSQL runs SQL statements against a DynamoDB Local database file
// with the SQLite binding DynamoDB Local itself ships (sqlite4java), so the
// file is written by the very SQLite version that reads it. The Go package
// dynamodblocal launches it as a single source file:
//
//     java -cp DynamoDBLocal_lib/sqlite4java.jar ExecSQL.java DB SQL...
import com.almworks.sqlite4java.SQLiteConnection;
import java.io.File;
import java.util.logging.Level;
import java.util.logging.Logger;

public class ExecSQL {
    public static void main(String[] args) throws Exception {
        Logger.getLogger("com.almworks.sqlite4java").setLevel(Level.OFF);
        SQLiteConnection db = new SQLiteConnection(new File(args[0]));
        db.open(false);
        try {
            // DynamoDB Local holds the file open; wait out a write of its own.
            db.setBusyTimeout(30_000);
            for (int i = 1; i < args.length; i++) {
                db.exec(args[i]);
            }
        } finally {
            db.dispose();
        }
    }
}
